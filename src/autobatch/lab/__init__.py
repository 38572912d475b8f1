"""The lab: what starts and measures real servers, for tests, benchmarks and the demo.

* :mod:`.serve`: the embedded Triton (``autobatch serve``, :class:`~.serve.TritonServer`);
* :mod:`.example_models`: the Python-backend models of ``model_repository/``, built in code;
* :mod:`.measure`: batch curves through Triton's own timers;
* :mod:`.fidelity`: what a real server adds to a curve, and the simulator against it;
* :mod:`.closed_loop`: a schedule of load against Triton with or without the sidecar;
* :mod:`.demo`: ``autobatch demo``;
* :mod:`.haproxy`, :mod:`.prometheus`: the real HAProxy and Prometheus, on loopback;
* :mod:`.process`: the one process lifecycle and poll-until helper they all use.

Nothing is imported here: Triton's Python-backend stub imports
``autobatch.lab.example_models`` and should load nothing else.
"""

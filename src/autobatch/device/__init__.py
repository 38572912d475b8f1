"""The emulated GPU: one device process that many clients share (``autobatch device``).

* :mod:`.protocol`: the wire format (one TCP connection per client context, one line a message);
* :mod:`.client`: :class:`~.client.DeviceClient`, a context's connection (the emulated
  model's instances use it from their Python-backend stubs, so it imports nothing heavy);
* :mod:`.server`: :class:`~.server.DeviceServer`, the device: the pure
  :class:`~autobatch.sharing.DeviceScheduler` run in real time, and ``/metrics`` with
  dcgm-exporter's names (:mod:`.metrics`);
* :mod:`.settings`: the device's YAML and options;
* :mod:`.runner`: co-tenant jobs run against a device and measured.

Nothing is imported here: the stub loads :mod:`.client` alone.
"""

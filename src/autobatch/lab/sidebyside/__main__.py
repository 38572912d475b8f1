"""``python -m autobatch.lab.sidebyside SPEC.json OUT.json``: one mode's worker (:mod:`.worker`)."""

from autobatch.lab.sidebyside.worker import main

main()

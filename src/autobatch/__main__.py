from autobatch.cli import main

main()

from vcrash.cli import main

main()

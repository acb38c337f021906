from nodeforge.cli import main

main()

from attribution.cli import main

main()

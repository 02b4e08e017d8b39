from kolong.cli import main

main()

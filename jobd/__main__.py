"""`python -m jobd` is `jobd`."""

from jobd.cli.jobd_main import main

main()

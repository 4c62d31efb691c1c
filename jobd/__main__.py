"""`python -m jobd` is `jobd`."""

from jobd.daemon.main import main

main()

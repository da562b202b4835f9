import sys

from execserver.cli import main

sys.exit(main())

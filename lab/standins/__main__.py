import sys

from lab.standins.main import main

sys.exit(main())

import sys

from lab.kubevirt_sim.main import main

sys.exit(main())

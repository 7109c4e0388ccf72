import sys

from hf_adapters.cli import main

sys.exit(main())

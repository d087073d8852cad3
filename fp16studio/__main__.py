import sys

from fp16studio.cli import main

sys.exit(main())

import multiprocessing
import sys

from fp16studio.cli import main

# In a frozen build the window's engine process starts as this executable: this runs it and exits.
multiprocessing.freeze_support()
sys.exit(main())

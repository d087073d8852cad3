import sys

print("giving up")
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 3)

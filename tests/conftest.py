import os
import sys

# Tests run the package installed in .venv (editable); nothing here changes sys.path.

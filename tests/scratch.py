"""scratch.py -- a test's scratch directory, removed when the test ends."""
import atexit
import os
import shutil
import tempfile


def scratch_dir(prefix):
    """A new directory under the system's temporary one, named from `prefix`,
    removed with everything in it when this process exits (not when a forked
    child does: the child did not make it)."""
    path = tempfile.mkdtemp(prefix=prefix)
    owner = os.getpid()
    atexit.register(lambda: os.getpid() == owner and shutil.rmtree(path, ignore_errors=True))
    return path

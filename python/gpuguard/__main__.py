"""`python -m gpuguard ARGS...` runs the installed `gpuguard` command with ARGS (docs/python.md)."""
import importlib.metadata
import os
import shutil
import sys


def _program():
    """The `gpuguard` program this package was installed with, else the one on PATH."""
    try:
        for file in importlib.metadata.distribution("gpuguard").files or []:
            if file.name == "gpuguard" and file.parent.name in ("bin", "scripts"):
                path = str(file.locate())
                if os.access(path, os.X_OK):
                    return path
    except importlib.metadata.PackageNotFoundError:
        pass
    return shutil.which("gpuguard")


def main():
    program = _program()
    if program is None:
        sys.exit("python -m gpuguard: the gpuguard program is not installed with this package, nor on PATH")
    os.execv(program, [program] + sys.argv[1:])


if __name__ == "__main__":
    main()

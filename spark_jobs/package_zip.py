"""package_zip: a zip of the packages the Spark jobs import, for ``spark-submit --py-files``.

    python -m spark_jobs.package_zip pybroker-spark.zip

Spark pickles the ``pybroker`` data source on the driver and unpickles it in
Python workers, so every executor must import ``spark_jobs``, ``protocol`` and
``storage``. Shipping this zip with ``--py-files`` puts them on the executors'
(and the driver's) ``sys.path`` without installing pybroker on the nodes; the
third-party dependencies (crc32c, zstandard, lz4, python-snappy, xxhash,
pyarrow, numpy) must still be installed in the workers' Python.
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

PACKAGES = ("spark_jobs", "protocol", "storage")
# The packages sit side by side, in a checkout and in site-packages alike.
PACKAGES_ROOT = Path(__file__).resolve().parent.parent


def package_files(root: Path = PACKAGES_ROOT) -> list[Path]:
    """The .py files of ``PACKAGES`` below ``root``, relative to it, in a stable order."""
    files = []
    for package in PACKAGES:
        package_dir = root / package
        if not (package_dir / "__init__.py").is_file():
            raise FileNotFoundError(f"package {package} not found in {root}")
        files.extend(path.relative_to(root) for path in package_dir.rglob("*.py") if "__pycache__" not in path.parts)
    return sorted(files)


def write_zip(output: Path, root: Path = PACKAGES_ROOT) -> int:
    """Write the zip; returns the number of files in it."""
    files = package_files(root)
    with zipfile.ZipFile(output, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for relative in files:
            archive.write(root / relative, relative.as_posix())
    return len(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", type=Path, help="the zip file to write")
    args = parser.parse_args(argv)
    count = write_zip(args.output)
    print(f"wrote {count} files of {', '.join(PACKAGES)} to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

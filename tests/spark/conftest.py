"""One local SparkSession for the Spark tests (skipped when pyspark is missing)."""

from __future__ import annotations

import os
import sys

import pytest

pyspark = pytest.importorskip("pyspark", reason="pyspark is not installed (pip install pyspark pyarrow)")
pytest.importorskip("pyarrow", reason="pyarrow is not installed (the pybroker data source yields Arrow batches)")


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from spark_jobs.datasource import PybrokerDataSource

    # Spark's Python workers must run this interpreter (the one with pybroker importable).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("pybroker-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    session.dataSource.register(PybrokerDataSource)
    yield session
    session.stop()

"""What every job shares: its command line, the Spark session, the data source.

A job runs as ``python -m spark_jobs.<job> --path LOG_DIRS ...`` (Spark embedded,
``local[*]`` unless ``--master`` says otherwise) or with ``spark-submit
spark_jobs/<job>.py ...`` (spark-submit's ``--master`` wins then).
"""

from __future__ import annotations

import argparse
import os
import sys


def job_arguments(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--path", required=True, help="the broker's log.dirs, comma-separated (a shared filesystem on a cluster)"
    )
    parser.add_argument("--master", default=None, help="Spark master URL (default: local[*], or spark-submit's)")
    return parser


def spark_session(app_name: str, master: str | None = None):
    from pyspark.sql import SparkSession

    # Python workers must run the interpreter that has pybroker importable.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    elif "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Not started by spark-submit (which launches the driver with a gateway): embed Spark.
        builder = builder.master("local[*]")
    spark = builder.getOrCreate()
    register_data_source(spark)
    return spark


def register_data_source(spark) -> None:
    from spark_jobs.datasource import PybrokerDataSource

    spark.dataSource.register(PybrokerDataSource)


def read_topics(spark, path: str, topics: str | None = None, pattern: str | None = None, **options):
    """A DataFrame of the records of ``topics`` (comma-separated) or of the topics matching ``pattern``."""
    reader = spark.read.format("pybroker").option("path", path)
    if topics:
        reader = reader.option("subscribe", topics)
    else:
        reader = reader.option("subscribePattern", pattern or ".*")
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()

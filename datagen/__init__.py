"""datagen: sample, build and measure TVM schedules into a durable Parquet dataset."""

__version__ = "0.1.0"

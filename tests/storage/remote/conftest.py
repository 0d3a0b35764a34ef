from tests.support.s3server import s3_server  # noqa: F401  (the fixture)

from tests.fakeapi.fixtures import fake_api

__all__ = ["fake_api"]

from tests.fakeapi.fixtures import clock, fake_api, kube

__all__ = ["clock", "fake_api", "kube"]

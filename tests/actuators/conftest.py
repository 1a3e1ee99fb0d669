from tests.fakeapi.fixtures import clock, core_api, fake_api, kube

__all__ = ["clock", "core_api", "fake_api", "kube"]

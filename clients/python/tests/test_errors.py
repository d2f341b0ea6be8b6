from sandboxed_plugins import PluginError


def test_started_comes_from_the_error_data():
    started = PluginError.from_body({"code": "unavailable", "message": "its worker ended", "data": {"started": True}})
    assert started.code == "unavailable" and started.started
    assert started.body() == {"code": "unavailable", "message": "its worker ended", "data": {"started": True}}
    plain = PluginError.from_body({"code": "unavailable", "message": "failed"})
    assert not plain.started and plain.body() == {"code": "unavailable", "message": "failed"}
    odd = PluginError.from_body({"code": "unavailable", "message": "x", "data": {"started": "yes"}})
    assert not odd.started

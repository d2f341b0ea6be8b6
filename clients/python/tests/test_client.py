"""The Python client against a real supervisor and the TestKit plugin."""
import asyncio
import os
import signal
import threading
import time

import pytest

from sandboxed_plugins import AsyncClient, Client, PluginError


def test_calls_status_send_and_open(plugin_supervisor, bundles):
    bundles("py.a")
    folder = bundles("py.b", dependencies=["py.a"])
    sup = plugin_supervisor([folder])
    client = sup.client
    assert client.call("py.a", "ping") == 1
    assert client.call("py.b", "echo", {"x": [1, 2]}) == {"x": [1, 2]}
    assert client.call("py.b", "call", {"target": "py.a", "method": "ping"}) == 1
    status = client.status()
    assert [p["identifier"] for p in status] == ["py.a", "py.b"]
    assert all(p["state"] == "running" and p["pid"] for p in status)
    sent = client.send("memoryWarning", plugin="py.a")
    assert sent["delivered"] == ["py.a"]
    assert client.open("plugin://py.a/echo?q=1") == {"q": "1"}


def test_errors_carry_the_protocols_code(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.e")])
    with pytest.raises(PluginError) as missing:
        sup.client.call("py.nope", "ping")
    assert missing.value.code == "notFound"
    with pytest.raises(PluginError) as failed:
        sup.client.call("py.e", "fail")
    assert failed.value.code == "custom" and "on purpose" in failed.value.message
    with pytest.raises(PluginError) as bad:
        sup.client.open("not-a-uri")
    assert bad.value.code == "badRequest"
    with pytest.raises(PluginError) as slow:
        sup.client.call("py.e", "sleep", {"ms": 2000}, timeout=0.2)
    assert slow.value.code == "timeout"
    with pytest.raises(PluginError) as unreachable:
        Client(socket=sup.home + "/nothing.sock", connect_timeout=0.1)
    assert unreachable.value.code == "unreachable"


def test_a_crash_is_heard_and_the_plugin_serves_again(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.crashy")])
    with sup.client.events("py.crashy") as events:
        pid = sup.crash("py.crashy")
        exited = events.wait_for(lambda e: e["event"] == "exited")
        assert exited["pid"] == pid and exited["lastExit"]["signal"] == "SIGSEGV"
        restarting = events.wait_for(lambda e: e["event"] == "restarting")
        assert restarting["attempt"] == 1
        assert restarting["delay"] == restarting["delayMs"] / 1000
        started = events.wait_for(lambda e: e["event"] == "started")
        assert started["pid"] != pid
    assert sup.client.call("py.crashy", "ping") == 1
    assert sup.status("py.crashy")["restarts"] == 1


def test_host_methods(plugin_supervisor, bundles):
    bundles("py.allowed", permissions=["host.call:*"])
    folder = bundles("py.none")
    sup = plugin_supervisor([folder])
    client = sup.client

    def greet(params):
        return f"hello {params['name']}"

    def refuse(params):
        raise PluginError("custom", "not today")

    def broken(params):
        raise ValueError("broken on purpose")

    client.method("greet", greet)
    client.method("refuse", refuse)
    client.method("broken", broken)

    def via(plugin, method, params=None):
        return client.call(plugin, "callHost", {"target": "@host", "method": method, "params": params}, timeout=10)

    assert via("py.allowed", "greet", {"name": "Ada"}) == "hello Ada"
    for plugin, method, code in [("py.none", "greet", "denied"), ("py.allowed", "missing", "notFound"),
                                 ("py.allowed", "refuse", "custom"), ("py.allowed", "broken", "pluginError")]:
        with pytest.raises(PluginError) as error:
            via(plugin, method, {"name": "x"})
        assert error.value.code == code, (plugin, method)


def test_one_client_many_threads(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.t")])
    client = sup.client
    results = {}

    def worker(n):
        results[n] = [client.call("py.t", "echo", n * 100 + i) for i in range(20)]

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[n] == [n * 100 + i for i in range(20)] for n in range(8))


def test_the_asyncio_twin(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.async", permissions=["host.call:*"])])

    async def main():
        async with await AsyncClient.connect(socket=sup.socket) as client:
            answers = await asyncio.gather(*[client.call("py.async", "echo", i) for i in range(64)])
            assert answers == list(range(64))

            async def greet(params):
                await asyncio.sleep(0)
                return f"hi {params}"

            await client.method("greet", greet)
            assert await client.call("py.async", "callHost", {"target": "@host", "method": "greet", "params": "Bo"}) == "hi Bo"
            # A cancelled task cancels its call in the plugin (TestKit records it).
            slow = asyncio.ensure_future(client.call("py.async", "sleep", {"ms": 20000}, timeout=30))
            await _until(lambda: client.call("py.async", "info"), lambda info: "sleeping:20000" in [e["event"] for e in info["events"]])
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            await _until(lambda: client.call("py.async", "info"), lambda info: "cancelled:20000" in [e["event"] for e in info["events"]])
            events = await client.events("py.async")
            os.kill((await client.status())[0]["pid"], signal.SIGSEGV)
            exited = await events.wait_for(lambda e: e["event"] == "exited")
            assert exited["lastExit"]["signal"] == "SIGSEGV"
            await events.wait_for(lambda e: e["event"] == "started")
            await events.close()

    asyncio.run(main())


async def _until(ask, holds, timeout=10.0):
    deadline = time.monotonic() + timeout
    while True:
        if holds(await ask()):
            return
        if time.monotonic() > deadline:
            raise AssertionError("the condition did not hold in time")
        await asyncio.sleep(0.01)


def test_the_fixture_stops_the_supervisor(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.s")])
    pid = sup.pid("py.s")
    assert "ready" in sup.ready_line
    assert sup.stop() == 0
    with pytest.raises(OSError):
        os.kill(pid, 0)


def test_calls_go_over_a_direct_link_after_the_first(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.link")])
    client = sup.client
    assert client.call("py.link", "ping") == 1
    sup.wait_until(lambda: client.linked_plugins == ["py.link"], what="the direct link")
    for i in range(50):
        assert client.call("py.link", "echo", i) == i
    with pytest.raises(PluginError) as failed:
        client.call("py.link", "fail")
    assert failed.value.code == "custom"
    with pytest.raises(PluginError) as slow:
        client.call("py.link", "sleep", {"ms": 3000}, timeout=0.2)
    assert slow.value.code == "timeout"

    def counted():
        return 'plugin_calls_total{plugin="py.link",outcome="ok"} 51' in sup_metrics(sup)
    sup.wait_until(counted, what="the link's counts in the metrics")
    # A restart: the link is taken back, calls go on through the supervisor, then a new link.
    sup.client.restart("py.link")
    assert client.call("py.link", "ping") == 1
    sup.wait_until(lambda: client.linked_plugins == ["py.link"], what="a new link")
    # The worker crashes with a call on the link that its plugin had started: sent through the
    # supervisor again (afterLink), it fails unavailable with started (sleep is not idempotent);
    # the next call waits for the restart.
    results = {}
    slow_call = threading.Thread(target=lambda: results.update(error=_error(lambda: client.call("py.link", "sleep", {"ms": 20000}, timeout=30))))
    slow_call.start()
    sup.wait_until(lambda: "sleeping:20000" in [e["event"] for e in client.call("py.link", "info")["events"]], what="the sleep")
    sup.crash("py.link")
    slow_call.join(10)
    assert results["error"].code == "unavailable" and results["error"].started, results["error"]
    # The next call waits for the restarted worker, even if the link saw the end first.
    assert client.call("py.link", "ping") == 1


def sup_metrics(sup):
    with Client(socket=sup.socket, direct_links=False) as other:
        return other._request({"type": "metrics"})


def _error(body):
    try:
        body()
        return None
    except PluginError as error:
        return error


def test_the_asyncio_client_takes_a_direct_link_too(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.alink")])

    async def main():
        async with await AsyncClient.connect(socket=sup.socket) as client:
            assert await client.call("py.alink", "ping") == 1
            await _until(lambda: _now(client.linked_plugins), lambda linked: linked == ["py.alink"])
            answers = await asyncio.gather(*[client.call("py.alink", "echo", i) for i in range(64)])
            assert answers == list(range(64))
            with pytest.raises(PluginError) as slow:
                await client.call("py.alink", "sleep", {"ms": 3000}, timeout=0.2)
            assert slow.value.code == "timeout"
            await _until(lambda: _now(sup_metrics(sup)), lambda text: 'plugin_calls_total{plugin="py.alink",outcome="ok"} 65' in text)
            # A restart takes the link back; calls go on; a new link follows.
            await client.restart("py.alink")
            assert await client.call("py.alink", "ping") == 1
            await _until(lambda: _now(client.linked_plugins), lambda linked: linked == ["py.alink"])
            # A crash with a started call on the link: it fails unavailable with started, the next waits for the restart.
            slow_call = asyncio.ensure_future(client.call("py.alink", "sleep", {"ms": 20000}, timeout=30))
            await _until(lambda: client.call("py.alink", "info"), lambda info: "sleeping:20000" in [e["event"] for e in info["events"]])
            sup.crash("py.alink")
            with pytest.raises(PluginError) as crashed:
                await slow_call
            assert crashed.value.code == "unavailable" and crashed.value.started
            assert await client.call("py.alink", "ping") == 1

    asyncio.run(main())


async def _now(value):
    return value


def test_streams_blocking_and_asyncio(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.rows")])
    with sup.client.stream("py.rows", "rows", {"count": 100}) as rows:
        assert [r["row"] for r in rows] == list(range(100))
    # Leaving early cancels the producer.
    with sup.client.stream("py.rows", "rows", {"count": 100000}) as rows:
        assert next(rows) == {"row": 0}
    deadline = time.monotonic() + 10
    while sup.client.call("py.rows", "streamReport")["cancelled"] < 1:
        assert time.monotonic() < deadline, "the producer was not cancelled"
        time.sleep(0.02)
    with pytest.raises(PluginError) as failed:
        list(sup.client.stream("py.rows", "rows", {"count": 10, "failAt": 3}))
    assert failed.value.code == "pluginError"
    with pytest.raises(PluginError) as plain:
        sup.client.call("py.rows", "rows", {"count": 1})
    assert plain.value.code == "badRequest"

    async def main():
        async with await AsyncClient.connect(socket=sup.socket) as client:
            got = [r["row"] async for r in await client.stream("py.rows", "rows", {"count": 50})]
            assert got == list(range(50))
            async with await client.stream("py.rows", "rows", {"count": 100000}) as rows:
                assert (await rows.__anext__()) == {"row": 0}
            await _until(lambda: client.call("py.rows", "streamReport"), lambda r: r["cancelled"] >= 2)

    asyncio.run(main())


def test_bytes_inline_and_as_a_memfd(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.bytes")])
    pattern = lambda n: bytes(i % 251 for i in range(n))  # noqa: E731
    assert sup.client.call_bytes("py.bytes", "bytes", {"size": 1000}) == pattern(1000)
    assert sup.client.call_bytes("py.bytes", "bytes", {"size": 300000}) == pattern(300000)
    # A plain call shows the placeholder, and the connection goes on (the inline bytes after it
    # are read, not taken for JSON).
    assert sup.client.call("py.bytes", "bytes", {"size": 10}) == {"$bytes": 0}
    assert sup.client.call("py.bytes", "ping") == 1

    # A stream of raw bytes: each element as bytes.
    elements = list(sup.client.stream("py.bytes", "blobBytes", {"count": 5, "size": 3000}))
    assert elements == [bytes((k + i) % 251 for i in range(3000)) for k in range(5)]
    # Bytes the other way: inline, and a sealed memfd handed in at the handoff socket.
    for n in (1000, 300000):
        data = pattern(n)
        assert sup.client.call("py.bytes", "digest", {"data": {"$bytes": 0}}, sending=[data]) == {
            "count": n, "sum": sum(data), "pattern": True}
    # Bytes nobody handed in: refused, naming why.
    with pytest.raises(PluginError) as refused:
        sup.client._request({"type": "call", "target": "py.bytes", "method": "digest", "params": {"data": {"$bytes": 0}},
                             "attachments": [{"length": 70000, "token": "0" * 32}]})
    assert refused.value.code == "badRequest" and "handed in" in str(refused.value)

    async def main():
        async with await AsyncClient.connect(socket=sup.socket) as client:
            assert await client.call_bytes("py.bytes", "bytes", {"size": 200000}) == pattern(200000)
            assert await client.call_bytes("py.bytes", "bytes", {"size": 7}) == pattern(7)
            digest = await client.call("py.bytes", "digest", {"data": {"$bytes": 0}}, sending=[pattern(100000)])
            assert digest == {"count": 100000, "sum": sum(pattern(100000)), "pattern": True}

    asyncio.run(main())


def test_an_upgrade_in_place_keeps_the_connection_and_its_events(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.up")])
    before = sup.status("py.up")
    with sup.client.events("py.up") as events:
        outcome = sup.client.upgrade()
        assert outcome["from"] == outcome["to"] and outcome["workers"] == 1 and outcome["pauseMs"] > 0
        assert sup.client.call("py.up", "ping") == 1
        after = sup.status("py.up")
        assert after["pid"] == before["pid"] and after["restarts"] == before["restarts"]
        assert after["supervisorVersion"] == outcome["to"]
        # The same event stream hears what happens after the upgrade.
        pid = sup.crash("py.up")
        assert events.wait_for(lambda e: e["event"] == "exited")["pid"] == pid
    with pytest.raises(PluginError) as refused:
        sup.client.upgrade("/nonexistent/supervisor")
    assert refused.value.code == "badRequest" and "does not exist" in refused.value.message


def test_the_asyncio_client_upgrades_too(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.aup")])

    async def run():
        async with await AsyncClient.connect(socket=sup.socket) as client:
            outcome = await client.upgrade()
            assert outcome["workers"] == 1
            assert await client.call("py.aup", "ping") == 1

    asyncio.run(run())


def test_a_cancelled_call_on_a_direct_link_lets_its_unlink_go(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.cancel")])

    async def main():
        async with await AsyncClient.connect(socket=sup.socket) as client:
            assert await client.call("py.cancel", "ping") == 1
            await _until(lambda: _now(client.linked_plugins), lambda linked: linked == ["py.cancel"])
            slow = asyncio.ensure_future(client.call("py.cancel", "sleep", {"ms": 20000}, timeout=30))
            await _until(lambda: client.call("py.cancel", "info"), lambda info: "sleeping:20000" in [e["event"] for e in info["events"]])
            started = time.monotonic()
            restart = asyncio.ensure_future(client.restart("py.cancel"))
            # The restart takes the link back; it waits for the call on it, which the task gives up.
            await _until(lambda: _now(client.linked_plugins), lambda linked: linked == [])
            slow.cancel()
            await restart
            # Not the supervisor's 5 s drain: the unlink was answered once the call was cancelled.
            assert time.monotonic() - started < 4.0

    asyncio.run(main())


def test_the_asyncio_client_reconnects_once_for_many_tasks(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.many")])

    def descriptors():
        return len(os.listdir("/proc/self/fd"))

    async def main():
        async with await AsyncClient.connect(socket=sup.socket, direct_links=False) as client:
            await client.method("greet", lambda params: "hi")
            assert await client.call("py.many", "ping") == 1
            before = descriptors()
            # The connection is lost; twenty tasks call at once: one connection comes back.
            client._writer.close()
            await _until(lambda: _now(client._writer), lambda writer: writer is None)
            answers = await asyncio.gather(*[client.call("py.many", "echo", i) for i in range(20)])
            assert answers == list(range(20))
            assert descriptors() <= before + 1

    asyncio.run(main())


def test_a_host_handler_of_a_lost_connection_answers_nobody(plugin_supervisor, bundles):
    folder = bundles("py.host", permissions=["host.call:tag"])
    sup = plugin_supervisor([folder])
    client = sup.client
    gates = {"OLD": threading.Event(), "NEW": threading.Event()}
    seen = []

    def tag(params):
        seen.append(params["tag"])
        gates[params["tag"]].wait(20)
        seen.append(("returned", params["tag"]))
        return params["tag"]

    client.method("tag", tag)

    def via(value):
        return client.call("py.host", "callHost", {"target": "@host", "method": "tag", "params": {"tag": value}}, timeout=15)

    def until(condition):
        deadline = time.monotonic() + 10
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert condition()

    old = threading.Thread(target=lambda: pytest.raises(PluginError, via, "OLD"), daemon=True)
    old.start()
    until(lambda: "OLD" in seen)
    # The connection is lost with OLD's handler still running; the next call reconnects, and the
    # supervisor's ids on the new connection start again: NEW gets the id OLD had.
    old_calls = client._host_calls
    client._lost(client._sock)
    old.join(15)
    answers = []
    new = threading.Thread(target=lambda: answers.append(via("NEW")), daemon=True)
    new.start()
    until(lambda: "NEW" in seen)
    # OLD's handler returns first, and its call is settled (taken from its connection's table)
    # before NEW's: its answer must not go to NEW's call.
    gates["OLD"].set()
    until(lambda: ("returned", "OLD") in seen and not old_calls)
    gates["NEW"].set()
    new.join(15)
    assert answers == ["NEW"]


def test_params_that_are_not_json_leave_nothing_waiting(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.json")])
    client = sup.client
    for _ in range(3):
        with pytest.raises((TypeError, ValueError)):
            client.call("py.json", "echo", {"a": object()})
    assert client._waiting == {}
    assert client.call("py.json", "echo", 5) == 5


def _state(pid):
    """The process state letter from /proc/<pid>/stat (T: stopped)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_status_send_and_restart_take_a_timeout(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.t")])
    client = sup.client
    assert client.status(timeout=5.0)[0]["state"] == "running"
    assert client.send("background", plugin="py.t", timeout=5.0)["delivered"] == ["py.t"]
    assert client.restart("py.t", timeout=10.0)
    # A supervisor that does not answer (stopped by SIGSTOP): each gives up at its timeout.
    loop = asyncio.new_event_loop()
    aclient = loop.run_until_complete(AsyncClient.connect(socket=sup.socket))
    os.kill(sup.process.pid, signal.SIGSTOP)
    try:
        # The signal stops it soon, not at once: every ask waits until it has (state T).
        deadline = time.monotonic() + 10
        while _state(sup.process.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(sup.process.pid) == "T"
        asks = (lambda: client.status(timeout=0.3), lambda: client.send("foreground", timeout=0.3),
                lambda: client.restart("py.t", timeout=0.3),
                lambda: loop.run_until_complete(aclient.status(timeout=0.3)),
                lambda: loop.run_until_complete(aclient.restart("py.t", timeout=0.3)))
        for ask in asks:
            started = time.monotonic()
            with pytest.raises(PluginError) as late:
                ask()
            assert late.value.code == "timeout"
            assert time.monotonic() - started < 3.0
    finally:
        os.kill(sup.process.pid, signal.SIGCONT)
    assert client.status(timeout=5.0)[0]["identifier"] == "py.t"
    loop.run_until_complete(aclient.close())
    loop.close()


def test_calls_on_a_direct_link_when_the_supervisor_dies(plugin_supervisor, bundles):
    """The supervisor killed (SIGKILL: its workers end with it) with calls in flight on a direct
    link: each one goes back to the supervisor (afterLink), finds none, and fails ``unavailable``
    (it may have run) by its own deadline. They waited out the 5 s connect window one after
    another and failed ``unreachable``: four calls of 2 s took 5.5 to 20.5 s."""
    sup = plugin_supervisor([bundles("py.gone")])
    client = Client(socket=sup.socket)
    try:
        assert client.call("py.gone", "ping") == 1
        sup.wait_until(lambda: client.linked_plugins == ["py.gone"], what="the direct link")
        results = {}

        def slow(i):
            began = time.monotonic()
            results[i] = (_error(lambda: client.call("py.gone", "sleep", {"ms": 20000}, timeout=2)), time.monotonic() - began)
        callers = [threading.Thread(target=slow, args=(i,)) for i in range(4)]
        for caller in callers:
            caller.start()
        sup.wait_until(lambda: sum(e["event"].startswith("sleeping") for e in sup.client.call("py.gone", "info")["events"]) >= 1,
                       what="a sleep under way")
        sup.process.kill()
        for caller in callers:
            caller.join(15)
        assert len(results) == 4
        for error, took in results.values():
            assert error is not None and error.code == "unavailable" and error.started, error
            assert took < 4.5, f"a 2 s call failed after {took:.1f} s"
    finally:
        client.close()


def test_the_asyncio_client_when_the_supervisor_dies(plugin_supervisor, bundles):
    sup = plugin_supervisor([bundles("py.agone")])

    async def main():
        async with await AsyncClient.connect(socket=sup.socket) as client:
            assert await client.call("py.agone", "ping") == 1
            await _until(lambda: _now(client.linked_plugins), lambda linked: linked == ["py.agone"])

            async def slow():
                began = time.monotonic()
                try:
                    await client.call("py.agone", "sleep", {"ms": 20000}, timeout=2)
                    return None, time.monotonic() - began
                except PluginError as error:
                    return error, time.monotonic() - began
            calls = [asyncio.ensure_future(slow()) for _ in range(4)]
            await asyncio.sleep(0)
            await _until(lambda: _now(sum(e["event"].startswith("sleeping") for e in sup.client.call("py.agone", "info")["events"])),
                         lambda n: n >= 1)
            sup.process.kill()
            for error, took in await asyncio.gather(*calls):
                assert error is not None and error.code == "unavailable" and error.started, error
                assert took < 4.5, f"a 2 s call failed after {took:.1f} s"

    asyncio.run(main())


def test_a_short_requests_failed_connect_does_not_fail_a_longer_one(plugin_supervisor, bundles):
    """With no supervisor, a call of 0.3 s tries to connect for 0.3 s and fails; a call of 10 s that
    waited for that try goes on trying, and is answered by the supervisor started 1 s later."""
    folder = bundles("py.back")
    sup = plugin_supervisor([folder])
    client = Client(socket=sup.socket, direct_links=False)
    try:
        assert client.call("py.back", "ping") == 1
        sup.process.kill()
        sup.process.wait()
        sup.wait_until(lambda: client._sock is None, what="the client to see the supervisor gone")
        results = {}

        def call(name, timeout):
            results[name] = _error(lambda: client.call("py.back", "ping", timeout=timeout))
        short = threading.Thread(target=call, args=("short", 0.3))
        short.start()
        time.sleep(0.05)
        longer = threading.Thread(target=call, args=("longer", 10))
        longer.start()
        short.join(5)
        time.sleep(1)
        plugin_supervisor([folder], home=sup.home)
        longer.join(15)
        assert results["short"] is not None and results["short"].code == "unreachable", results
        assert results["longer"] is None, results
    finally:
        client.close()


def test_the_asyncio_client_keeps_a_longer_requests_own_connect_window(plugin_supervisor, bundles):
    folder = bundles("py.aback")
    sup = plugin_supervisor([folder])

    async def main():
        async with await AsyncClient.connect(socket=sup.socket, direct_links=False) as client:
            assert await client.call("py.aback", "ping") == 1
            sup.process.kill()
            sup.process.wait()
            await _until(lambda: _now(client._writer), lambda writer: writer is None)

            async def call(timeout):
                try:
                    return await client.call("py.aback", "ping", timeout=timeout)
                except PluginError as error:
                    return error
            short = asyncio.ensure_future(call(0.3))
            await asyncio.sleep(0.05)
            longer = asyncio.ensure_future(call(10))
            assert isinstance(await short, PluginError) and (await short).code == "unreachable"
            await asyncio.sleep(1)
            await asyncio.get_running_loop().run_in_executor(None, lambda: plugin_supervisor([folder], home=sup.home))
            assert await longer == 1

    asyncio.run(main())


def test_a_short_request_waits_no_longer_than_its_timeout_for_anothers_try(plugin_supervisor, bundles):
    """A request of 10 s tries to reach a supervisor that is gone; one of 0.3 s made meanwhile
    fails by its own timeout, not after the other's 10 s."""
    sup = plugin_supervisor([bundles("py.wait")])
    client = Client(socket=sup.socket, direct_links=False)
    try:
        assert client.call("py.wait", "ping") == 1
        sup.process.kill()
        sup.process.wait()
        sup.wait_until(lambda: client._sock is None, what="the client to see the supervisor gone")
        longer = threading.Thread(target=lambda: _error(lambda: client.call("py.wait", "ping", timeout=10)))
        longer.start()
        time.sleep(0.1)
        began = time.monotonic()
        error = _error(lambda: client.call("py.wait", "ping", timeout=0.3))
        took = time.monotonic() - began
        assert error is not None and error.code == "unreachable", error
        assert took < 2, f"a 0.3 s request failed after {took:.1f} s"
        longer.join(15)
    finally:
        client.close()

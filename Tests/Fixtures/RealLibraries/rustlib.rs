// A Rust `cdylib` plugin (std only, built with plain `rustc` by the tests): what Rust's standard
// library does routinely must work in the sandbox. Each method answers "ok" or a pluginError.
//   threads      eight named threads (pthread_setname_np) exchanging over channels
//   tempfile     a file in std::env::temp_dir() (TMPDIR, the worker's private folder)
//   parallelism  std::thread::available_parallelism (reads the cgroup's cpu.max / cpu quota files)
//   cpus         the number available_parallelism gives (the only method answering with a number)
//   time         Instant, SystemTime, sleep
//   alloc        64 MiB allocated and touched
//   exe          std::env::current_exe (/proc/self/exe)
//   panic        a panic caught with catch_unwind (unwinding, the panic hook writing to stderr)
use std::ffi::c_void;
use std::io::{Read, Write};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

// The ABI's structs, as the Rust example declares them.
#[path = "../../../examples/RustHello/src/sp_plugin.rs"]
mod sp_plugin;
use sp_plugin::{SpHost, SpPlugin, SP_ABI_VERSION};

struct Host(*const SpHost);
unsafe impl Send for Host {}
unsafe impl Sync for Host {}
static mut HOST: Host = Host(std::ptr::null());

fn send(text: &str) {
    unsafe {
        let host = &*HOST.0;
        (host.send)(host.ctx, text.as_ptr(), text.len());
    }
}

fn field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let pattern = format!("\"{}\":", key);
    let start = json.find(&pattern)? + pattern.len();
    let rest = json[start..].trim_start();
    if let Some(stripped) = rest.strip_prefix('"') {
        stripped.find('"').map(|end| &stripped[..end])
    } else {
        let end = rest.find(|c: char| c == ',' || c == '}').unwrap_or(rest.len());
        Some(rest[..end].trim())
    }
}

fn run(method: &str) -> Result<(), String> {
    match method {
        "threads" => {
            let (tx, rx) = mpsc::channel();
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let tx = tx.clone();
                    std::thread::Builder::new()
                        .name(format!("rust-worker-{}", i))
                        .spawn(move || tx.send(i * i).unwrap())
                        .map_err(|e| format!("spawn: {}", e))
                })
                .collect::<Result<_, _>>()?;
            for h in handles { h.join().map_err(|_| "join failed".to_string())?; }
            drop(tx);
            let sum: i32 = rx.iter().sum();
            if sum != 140 { return Err(format!("sum {}", sum)); }
            Ok(())
        }
        "tempfile" => {
            let path = std::env::temp_dir().join("rust-plugin.txt");
            std::fs::File::create(&path).and_then(|mut f| f.write_all(b"hello")).map_err(|e| format!("write {:?}: {}", path, e))?;
            let mut text = String::new();
            std::fs::File::open(&path).and_then(|mut f| f.read_to_string(&mut text)).map_err(|e| format!("read: {}", e))?;
            std::fs::remove_file(&path).map_err(|e| format!("remove: {}", e))?;
            if text != "hello" { return Err("read back something else".into()); }
            Ok(())
        }
        "parallelism" => std::thread::available_parallelism().map(|_| ()).map_err(|e| format!("available_parallelism: {}", e)),
        "time" => {
            let t0 = Instant::now();
            std::thread::sleep(Duration::from_millis(10));
            SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_err(|e| e.to_string())?;
            if t0.elapsed() < Duration::from_millis(10) { return Err("slept less than asked".into()); }
            Ok(())
        }
        "alloc" => {
            let mut v = vec![0u8; 64 << 20];
            for i in (0..v.len()).step_by(4096) { v[i] = 1; }
            if v.iter().step_by(4096).filter(|&&b| b == 1).count() != (64 << 20) / 4096 { return Err("pages".into()); }
            Ok(())
        }
        "exe" => std::env::current_exe().map(|_| ()).map_err(|e| format!("current_exe: {}", e)),
        "panic" => match std::panic::catch_unwind(|| panic!("expected")) {
            Err(_) => Ok(()),
            Ok(()) => Err("no panic".into()),
        },
        other => Err(format!("no method {}", other)),
    }
}

extern "C" fn receive(_ctx: *mut c_void, bytes: *const u8, len: usize) {
    let json = unsafe { std::str::from_utf8(std::slice::from_raw_parts(bytes, len)).unwrap_or("") };
    let id = field(json, "id").unwrap_or("0").to_string();
    if field(json, "type") != Some("call") {
        send(&format!("{{\"type\":\"reply\",\"id\":{},\"result\":null}}", id));
        return;
    }
    let method = field(json, "method").unwrap_or("").to_string();
    if method == "cpus" {
        // How many threads std would size a pool for (the cgroup's CPU quota, if it finds it).
        let n = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
        send(&format!("{{\"type\":\"reply\",\"id\":{},\"result\":{}}}", id, n));
        return;
    }
    match run(&method) {
        Ok(()) => send(&format!("{{\"type\":\"reply\",\"id\":{},\"result\":\"ok\"}}", id)),
        Err(e) => send(&format!(
            "{{\"type\":\"reply\",\"id\":{},\"error\":{{\"code\":\"pluginError\",\"message\":\"{}: {}\"}}}}",
            id, method, e.replace('"', "'")
        )),
    }
}

#[no_mangle]
pub extern "C" fn sp_plugin_create(host: *const SpHost) -> *const SpPlugin {
    unsafe { HOST = Host(host); }
    Box::leak(Box::new(SpPlugin { abi_version: SP_ABI_VERSION, ctx: std::ptr::null_mut(), receive, destroy: None }))
}

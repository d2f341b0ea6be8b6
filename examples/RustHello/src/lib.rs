//! A plugin in Rust: a `cdylib` that exports `sp_plugin_create` with the layout of
//! `SDK/Sources/CPluginABI/include/sp_plugin.h` (docs/languages.md). std only, no crates.
//!
//! Methods: "hello" → "Hello from Rust!"; "add" with params [a, b] → a + b. Every event is
//! answered with null. Requests come on the worker's I/O thread; this plugin answers at once.

use std::ffi::c_void;

mod sp_plugin;
use sp_plugin::{SpHost, SpPlugin, SP_ABI_VERSION};

struct Plugin {
    host: *const SpHost,
}

impl Plugin {
    fn send(&self, frame: &str) {
        // SAFETY: the host outlives the plugin (sp_plugin.h: valid until `destroy` returns).
        let host = unsafe { &*self.host };
        (host.send)(host.ctx, frame.as_ptr(), frame.len());
    }

    fn reply(&self, id: &str, member: &str, value: &str) {
        self.send(&format!(r#"{{"type":"reply","id":{},"{}":{}}}"#, id, member, value));
    }

    fn receive(&self, json: &str) {
        // (A `match`, not `let ... else`: Debian 12's rustc 1.63 builds this too.)
        let (kind, id) = match (field(json, "type"), field(json, "id")) {
            (Some(kind), Some(id)) => (kind, id),
            _ => return,
        };
        match (kind, field(json, "method")) {
            ("event", _) => self.reply(id, "result", "null"),
            ("call", Some("hello")) => self.reply(id, "result", r#""Hello from Rust!""#),
            ("call", Some("add")) => match add(json) {
                Some(sum) => self.reply(id, "result", &sum.to_string()),
                None => self.reply(id, "error", r#"{"code":"badRequest","message":"add takes [a, b]"}"#),
            },
            ("call", _) | ("open", _) => {
                self.reply(id, "error", r#"{"code":"notFound","message":"no such method; try hello or add"}"#)
            }
            _ => {}
        }
    }
}

/// The value of a top-level `"key":` in the supervisor's compact JSON (a string without escapes,
/// or a number). A plugin that reads more should use a JSON crate such as serde_json.
fn field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let pattern = format!("\"{}\":", key);
    let rest = &json[json.find(&pattern)? + pattern.len()..];
    if let Some(text) = rest.strip_prefix('"') {
        return text.find('"').map(|end| &text[..end]);
    }
    let end = rest.find(|c: char| c == ',' || c == '}').unwrap_or(rest.len());
    Some(&rest[..end])
}

fn add(json: &str) -> Option<i64> {
    let start = json.find("\"params\":[")? + "\"params\":[".len();
    let list = &json[start..start + json[start..].find(']')?];
    let numbers: Vec<i64> = list.split(',').map(|n| n.trim().parse().ok()).collect::<Option<_>>()?;
    match numbers.as_slice() {
        [a, b] => a.checked_add(*b),
        _ => None,
    }
}

extern "C" fn receive(ctx: *mut c_void, json: *const u8, len: usize) {
    // SAFETY: ctx is the Plugin made in sp_plugin_create; the bytes are valid during the call.
    let plugin = unsafe { &*(ctx as *const Plugin) };
    let bytes = unsafe { std::slice::from_raw_parts(json, len) };
    if let Ok(text) = std::str::from_utf8(bytes) {
        plugin.receive(text);
    }
}

extern "C" fn destroy(ctx: *mut c_void) {
    // SAFETY: made by Box::into_raw in sp_plugin_create, freed once here.
    drop(unsafe { Box::from_raw(ctx as *mut Plugin) });
}

/// The one symbol the worker looks for.
#[no_mangle]
pub extern "C" fn sp_plugin_create(host: *const SpHost) -> *const SpPlugin {
    // SAFETY: the worker passes a valid host.
    if host.is_null() || unsafe { (*host).abi_version } != SP_ABI_VERSION {
        return std::ptr::null();
    }
    let ctx = Box::into_raw(Box::new(Plugin { host })) as *mut c_void;
    Box::into_raw(Box::new(SpPlugin { abi_version: SP_ABI_VERSION, ctx, receive, destroy: Some(destroy) }))
}

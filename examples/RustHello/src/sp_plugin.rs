//! sp_plugin.h in Rust: the two structs and the version, laid out as the C header lays them out
//! (`SDK/Sources/CPluginABI/include/sp_plugin.h`). A Rust plugin copies this file (or includes it,
//! as the tests' Rust library does) and exports `sp_plugin_create`.

use std::ffi::c_void;

/// SP_ABI_VERSION.
pub const SP_ABI_VERSION: u32 = 1;

/// `sp_host`: given to the plugin, valid until its `destroy` returns.
#[repr(C)]
pub struct SpHost {
    pub abi_version: u32,
    pub ctx: *mut c_void,
    /// Hands one JSON message to the supervisor; thread-safe. 0, or a negative errno.
    pub send: extern "C" fn(*mut c_void, *const u8, usize) -> i32,
}

/// `sp_plugin`: returned by the plugin, valid until its `destroy` returns.
#[repr(C)]
pub struct SpPlugin {
    pub abi_version: u32,
    pub ctx: *mut c_void,
    pub receive: extern "C" fn(*mut c_void, *const u8, usize),
    pub destroy: Option<extern "C" fn(*mut c_void)>,
}

/* The benchmark's C relay plugin (crelay.c): nothing to include; the plugin exports
 * sp_plugin_create (SDK/Sources/CPluginABI/include/sp_plugin.h). */

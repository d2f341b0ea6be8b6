/// A new plugin bundle that builds and runs (`supervisor new`, SPEC §6): a manifest, the source of
/// one method that answers, a build file and a four-line README. Pure: the CLI writes the files.
public enum Scaffold {
    public enum Language: String, CaseIterable, Sendable {
        case swift, c
    }

    /// What to write, relative to the bundle folder, and how to build it there.
    public struct Plan: Sendable {
        public var files: [(path: String, text: String)]
        /// A shell command, run in the bundle folder, that leaves the library beside plugin.json.
        public var build: String
        /// The library's file name (plugin.json's `library`).
        public var library: String
    }

    static let taken: Set<String> = ["Swift", "Foundation", "FoundationEssentials", "Dispatch", "Glibc", "Synchronization",
                                     "PluginSDK", "PluginProtocol", "CPluginABI", "SDK", "XCTest", "Testing"]

    /// A module name for `identifier`: its last component in UpperCamelCase ("com.example.hello-world"
    /// → "HelloWorld"), prefixed when it would not start with a letter.
    public static func moduleName(_ identifier: String) -> String {
        let last = identifier.split(separator: ".").last.map(String.init) ?? identifier
        let words = last.split(whereSeparator: { !$0.isLetter && !$0.isNumber })
        var name = words.map { $0.prefix(1).uppercased() + $0.dropFirst() }.joined()
        if name.isEmpty || !(name.first!.isLetter) { name = "Plugin" + name }
        // A module may not take the name of one it imports, or of the standard ones.
        if taken.contains(name) { name += "Plugin" }
        return name
    }

    /// The files for a plugin `identifier` in `language`. `sdk` is the SDK package's folder
    /// (`<clone>/SDK`): the Swift package depends on it by path, the C build includes its header.
    public static func plan(identifier: String, language: Language, sdk: String) -> Plan {
        let module = moduleName(identifier)
        switch language {
        case .swift:
            let library = "lib\(module).so"
            // A new file, not the old one written over: a running worker maps the old one, and
            // writing into it crashes that worker (docs/abi.md, "Replacing a library").
            let build = "swift build -c release && cp --remove-destination .build/release/\(library) ."
            return Plan(files: [
                ("plugin.json", manifest(identifier, library: library)),
                ("Package.swift", swiftPackage(module, sdk: sdk)),
                ("Sources/\(module)/\(module).swift", swiftSource(identifier, module: module)),
                ("README.md", readme(identifier, build: build)),
                (".gitignore", ".build/\n*.so\n"),
            ], build: build, library: library)
        case .c:
            let base = module.lowercased()
            let library = "lib\(base).so"
            let build = "make"
            return Plan(files: [
                ("plugin.json", manifest(identifier, library: library)),
                ("Makefile", makefile(base, sdk: sdk)),
                ("\(base).c", cSource(identifier)),
                ("README.md", readme(identifier, build: build)),
                (".gitignore", "*.so\n"),
            ], build: build, library: library)
        }
    }

    static func manifest(_ identifier: String, library: String) -> String {
        """
        {
          "identifier": "\(identifier)",
          "version": "0.1.0",
          "library": "\(library)"
        }

        """
    }

    static func readme(_ identifier: String, build: String) -> String {
        """
        # \(identifier)
        Build, in this folder: `\(build)`
        Run: `supervisor start --plugins <the folder that holds this one>`
        After a rebuild: `supervisor reload` starts the new library
        Call: `supervisor call \(identifier) hello`

        """
    }

    static func swiftPackage(_ module: String, sdk: String) -> String {
        """
        // swift-tools-version:6.0
        // A plugin for the sandboxed plugin runner. It depends on the plugin SDK alone.
        import PackageDescription

        let package = Package(
            name: "\(module)",
            products: [
                .library(name: "\(module)", type: .dynamic, targets: ["\(module)"]),
            ],
            dependencies: [
                .package(path: "\(sdk)"),
            ],
            targets: [
                .target(name: "\(module)", dependencies: [.product(name: "PluginSDK", package: "SDK")]),
            ],
            swiftLanguageModes: [.v6]
        )

        """
    }

    static func swiftSource(_ identifier: String, module: String) -> String {
        """
        import PluginSDK

        /// \(identifier): one method, `hello`. Add methods in `exports`; docs/abi.md says how.
        final class \(module): Pluggable {
            static let identifier = "\(identifier)"

            init() {}

            func startup(_ context: PluginContext) async throws {
                context.log(.info, "\\(Self.identifier) is up")
            }

            func exports(_ api: PluginAPI) {
                api.method("hello") { "Hello from \\(Self.identifier)!" }
            }
        }

        /// The one symbol the worker looks for.
        @_cdecl("sp_plugin_create")
        public func spPluginCreate(_ host: OpaquePointer?) -> OpaquePointer? { PluginExport.create(\(module).self, host: host) }

        """
    }

    static func makefile(_ base: String, sdk: String) -> String {
        """
        # Builds lib\(base).so against the plugin ABI header (sp_plugin.h) in the SDK.
        SDK ?= \(sdk)
        CFLAGS ?= -O2 -Wall -Wextra

        lib\(base).so: \(base).c
        \tcc -shared -fPIC $(CFLAGS) -I $(SDK)/Sources/CPluginABI/include -o $@ $<

        clean:
        \trm -f lib\(base).so

        .PHONY: clean

        """
    }

    static func cSource(_ identifier: String) -> String {
        """
        /*
         * \(identifier): a plugin in C against sp_plugin.h. One method, "hello"; every event is
         * answered with null. The supervisor sends compact JSON; a plugin that reads more than a few
         * fields should use a JSON library (docs/abi.md).
         */
        #define _GNU_SOURCE
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include "sp_plugin.h"

        static const sp_host *host;

        /* The string value of "key" (no escapes) into out; 1 if found. */
        static int string_field(const char *json, size_t len, const char *key, char *out, size_t cap) {
            char pattern[64];
            snprintf(pattern, sizeof pattern, "\\"%s\\":\\"", key);
            const char *p = memmem(json, len, pattern, strlen(pattern));
            if (!p) return 0;
            p += strlen(pattern);
            size_t i = 0;
            while (p < json + len && *p != '"' && i + 1 < cap) out[i++] = *p++;
            out[i] = 0;
            return 1;
        }

        static int id_field(const char *json, size_t len, unsigned long long *id) {
            const char *p = memmem(json, len, "\\"id\\":", 5);
            if (!p) return 0;
            *id = strtoull(p + 5, NULL, 10);
            return 1;
        }

        static void answer(unsigned long long id, const char *member, const char *value) {
            char frame[512];
            int n = snprintf(frame, sizeof frame, "{\\"type\\":\\"reply\\",\\"id\\":%llu,\\"%s\\":%s}", id, member, value);
            host->send(host->ctx, (const uint8_t *)frame, (size_t)n);
        }

        static void receive(void *ctx, const uint8_t *bytes, size_t len) {
            (void)ctx;
            const char *json = (const char *)bytes;
            char type[16], method[64];
            unsigned long long id;
            if (!string_field(json, len, "type", type, sizeof type) || !id_field(json, len, &id)) return;
            if (strcmp(type, "event") == 0) {
                answer(id, "result", "null");
            } else if (strcmp(type, "call") == 0 && string_field(json, len, "method", method, sizeof method)
                       && strcmp(method, "hello") == 0) {
                answer(id, "result", "\\"Hello from \(identifier)!\\"");
            } else if (strcmp(type, "call") == 0 || strcmp(type, "open") == 0) {
                answer(id, "error", "{\\"code\\":\\"notFound\\",\\"message\\":\\"no such method or route; try hello\\"}");
            }
        }

        static void destroy(void *ctx) { (void)ctx; }

        static const sp_plugin plugin = { SP_ABI_VERSION, NULL, receive, destroy };

        const sp_plugin *sp_plugin_create(const sp_host *h) {
            if (h->abi_version != SP_ABI_VERSION) return NULL;
            host = h;
            return &plugin;
        }

        """
    }
}

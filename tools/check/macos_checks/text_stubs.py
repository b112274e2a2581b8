"""What the SDK's system libraries export, read from its text stubs."""
import os
import re

TBD_SYMBOL_KEYS = {"symbols": "{}", "weak-symbols": "{}", "thread-local-symbols": "{}",
                   "objc-classes": "_OBJC_CLASS_$_{0} _OBJC_METACLASS_$_{0}", "objc-eh-types": "_OBJC_EHTYPE_$_{}",
                   "objc-ivars": "_OBJC_IVAR_$_{}"}


class TextStubs:
    """The SDK's text stubs (.tbd, `--- !tapi-tbd` v4 documents): what each
    system library exports for arm64-macos, re-exported libraries followed."""

    def __init__(self, sdk):
        self.sdk = sdk
        self.docs = {}  # install name -> (set of symbols, [re-exported install names])

    def _load(self, path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for doc in re.split(r"^--- !tapi-tbd", text, flags=re.M)[1:]:
            name = re.search(r"^install-name:\s*'?([^'\n]+)'?", doc, re.M)
            if name is None:
                continue
            symbols, reexports = set(), []
            sections = [(m.start(), m.group(1)) for m in re.finditer(r"^([a-z-]+):", doc, re.M)]
            targets = []
            for m in re.finditer(r"([a-z-]+):\s*\[([^\]]*)\]", doc):
                section = next((sec for pos, sec in reversed(sections) if pos <= m.start()), "")
                key, values = m.group(1), [v.strip().strip("'") for v in m.group(2).split(",") if v.strip()]
                if key == "targets":
                    targets = values
                elif "arm64-macos" not in targets:
                    continue
                elif section in ("exports", "reexports") and key in TBD_SYMBOL_KEYS:
                    for v in values:
                        symbols.update(TBD_SYMBOL_KEYS[key].format(v).split())
                elif section == "reexported-libraries" and key == "libraries":
                    reexports += values
            self.docs[name.group(1).strip()] = (symbols, reexports)

    def _stub_path(self, install_name):
        base = os.path.join(self.sdk, install_name.lstrip("/"))
        for candidate in (os.path.splitext(base)[0] + ".tbd" if base.endswith(".dylib") else base + ".tbd",
                          base + ".tbd"):
            if os.path.exists(candidate):
                return candidate
        return None

    def library(self, install_name):
        if install_name not in self.docs:
            path = self._stub_path(install_name)
            if path is not None:
                self._load(path)
        return self.docs.get(install_name)

    def exports(self, install_name, symbol, depth=0):
        lib = self.library(install_name)
        if lib is None or depth > 8:
            return False
        return symbol in lib[0] or any(self.exports(r, symbol, depth + 1) for r in lib[1])

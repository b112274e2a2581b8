"""The TensorFlow images of one unpacked macOS wheel, as dyld resolves
symbols through them."""
import os
import re

from .macho import LC_REEXPORT_DYLIB, MachO, MachOError

# The images `import tensorflow` has loaded before it loads tensorflow-plugins/
# (paths in the wheel's tensorflow/ folder; those a release lacks are skipped).
TF_IMAGES = (
    "python/_pywrap_tensorflow_internal.so",
    "python/lib_pywrap_tensorflow_common.dylib",
    "libtensorflow_framework.2.dylib",
    "libtensorflow_cc.2.dylib",
)


class TensorFlow:
    """The TensorFlow images of one unpacked wheel, with their exports."""

    def __init__(self, tf_dir):
        if os.path.isdir(os.path.join(tf_dir, "tensorflow")):
            tf_dir = os.path.join(tf_dir, "tensorflow")
        self.dir = tf_dir
        self.images = {rel: MachO(os.path.join(tf_dir, rel)) for rel in TF_IMAGES
                       if os.path.exists(os.path.join(tf_dir, rel))}
        if "python/_pywrap_tensorflow_internal.so" not in self.images:
            raise MachOError(f"{tf_dir}: no python/_pywrap_tensorflow_internal.so "
                             "(pass an unpacked TensorFlow wheel's tensorflow/ folder)")
        self.version = self._version()
        self._tries = {}

    def _version(self):
        """The wheel's own: Version in tensorflow-X.dist-info/METADATA beside
        the folder (its name without one); else a tf-X / tensorflow-X folder
        in the path (never another version number the path holds)."""
        parent = os.path.dirname(os.path.abspath(self.dir))
        for entry in sorted(os.listdir(parent)):
            match = re.match(r"tensorflow-([0-9][^-]*)\.dist-info$", entry)
            if match:
                try:
                    with open(os.path.join(parent, entry, "METADATA"), encoding="utf-8") as f:
                        for line in f:
                            if line.startswith("Version:"):
                                return line.split(":", 1)[1].strip()
                except OSError:
                    pass
                return match.group(1)
        found = re.findall(r"(?:^|/)(?:tf|tensorflow)-(\d+\.\d+\.\d+(?:rc\d+)?)", os.path.abspath(self.dir))
        return found[-1] if found else self.dir

    def trie(self, rel):
        if rel not in self._tries:
            self._tries[rel] = self.images[rel].exports()
        return self._tries[rel]

    def by_install_name(self, name):
        return next((rel for rel, m in self.images.items() if m.install_name == name), None)

    def resolve(self, rel, symbol, depth=0):
        """Whether image `rel` exports `symbol` (itself, through a re-export
        entry or a re-exported library), as dyld looks it up."""
        if depth > 8:
            return False
        image = self.images[rel]
        found = self.trie(rel).lookup(symbol)
        if found is not None:
            if found[0] == "defined":
                return True
            target = self.dependency(image.library(found[1]))
            return target is not None and self.resolve(target, found[2] or symbol, depth + 1)
        for cmd, path in image.dylibs:
            target = self.dependency(path) if cmd == LC_REEXPORT_DYLIB else None
            if target is not None and self.resolve(target, symbol, depth + 1):
                return True
        return False

    def dependency(self, path):
        """The TensorFlow image a load command's path names (None: not one of them)."""
        rel = self.by_install_name(path)
        if rel is None and path.startswith("@rpath/"):
            rel = next((r for r in self.images if os.path.basename(r) == path[len("@rpath/"):]), None)
        return rel

    def exporters(self, symbol):
        return [rel for rel in self.images if self.resolve(rel, symbol)]

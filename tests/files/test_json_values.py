import subprocess
import sys

from hf_adapters.files.json_values import write_atomically

KILLED_WRITE = """
import os, sys
from pathlib import Path
from hf_adapters.files.json_values import write_atomically

os.replace = lambda *args: os._exit(9)  # killed after writing the temporary file, before renaming it
write_atomically(Path(sys.argv[1]), "half")
"""


def test_what_a_killed_write_leaves_does_not_accumulate_and_the_next_write_replaces_it(tmp_path):
    path = tmp_path / "complete.json"
    for _ in range(3):
        killed = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(path)], check=False)
        assert killed.returncode == 9
    assert len(list(tmp_path.iterdir())) == 1

    write_atomically(path, '{"rows": 3}')

    assert [entry.name for entry in tmp_path.iterdir()] == ["complete.json"]
    assert path.read_text() == '{"rows": 3}'

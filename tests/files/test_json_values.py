import subprocess
import sys

from hf_adapters.files.json_values import remove_temporary_files, write_atomically

KILLED_WRITE = """
import os, sys
from pathlib import Path
from hf_adapters.files.json_values import write_atomically

os.replace = lambda *args: os._exit(9)  # killed after writing the temporary file, before renaming it
write_atomically(Path(sys.argv[1]), "half")
"""


def killed_write(path):
    """Leave what ``write_atomically(path, ...)`` leaves when killed before its rename."""
    assert subprocess.run([sys.executable, "-c", KILLED_WRITE, str(path)], check=False).returncode == 9


def test_what_killed_writes_leave_is_removed_for_the_folder_or_for_one_file(tmp_path):
    record, other = tmp_path / "complete.json", tmp_path / "rows.json"
    killed_write(record)
    killed_write(record)
    killed_write(other)
    assert len(list(tmp_path.iterdir())) == 3

    remove_temporary_files(tmp_path, of=record.name)
    assert [entry.name.split(".tmp-")[0] for entry in tmp_path.iterdir()] == ["rows.json"]
    write_atomically(record, '{"rows": 3}')
    remove_temporary_files(tmp_path)

    assert [entry.name for entry in tmp_path.iterdir()] == ["complete.json"]
    assert record.read_text() == '{"rows": 3}'

"""`sqlwa run`'s settings options are made from RunSettings' settings, not written again."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from click.testing import CliRunner

from helpers import sqlwa_leftovers
from sqlwa.cli import main
from sqlwa.cli.run import run
from sqlwa.measure.engine import option_of, setting_fields


def offered_settings() -> list[dataclasses.Field]:
    return [f for _, f in setting_fields() if option_of(f) is not None]


def test_every_offered_setting_is_an_option_with_its_help():
    options = {param.name: param for param in run.params}
    for setting in offered_settings():
        param = options[setting.name]
        option = option_of(setting)
        assert (option.flag or f"--{setting.name.replace('_', '-')}") in param.opts
        assert param.help == option.help


def test_choices_and_bounds_come_from_the_field():
    runner = CliRunner()
    refused = runner.invoke(run, ["--journal", "nosuchmode"])
    assert refused.exit_code == 2 and "nosuchmode" in refused.output
    assert runner.invoke(run, ["--txns", "0"]).exit_code == 2  # Option(minimum=1)
    assert runner.invoke(run, ["--think-time-ms", "-1"]).exit_code == 2  # Option(minimum=0)


def test_internal_settings_are_not_options():
    names = {param.name for param in run.params}
    assert not {"map_extents", "extents_from", "count_vfs"} & names


def test_non_finite_numbers_are_refused_before_anything_runs():
    runner = CliRunner()
    for args in (
        ["--frame-budget-ms", "nan"],
        ["--fill", "nan"],
        ["--think-time-ms", "inf"],
        ["--think-time-ms", "1e300"],
    ):  # 1e300 ms overflowed the engine's sleep: a Rust panic
        result = runner.invoke(run, args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output


def test_lab_options_without_a_lab_are_one_error_and_nothing_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    for args in (
        ["--fill", "50"],
        ["--mkfs-opts", "-O fast_commit"],
        ["--mount-opts", "noatime"],
        ["--device-delay", "10"],
    ):
        try:
            main(["run", "-n", "2", *args, "--out", str(out)])
        except SystemExit as exit:
            assert exit.code == 2
        err = capsys.readouterr().err
        assert err.startswith("sqlwa: error: ") and args[0] in err and "--fs" in err
        assert not out.exists()


BAD_SETTINGS = [
    ["--page-size", "-5"],
    ["--seed", "-1"],
    ["--txns", "99999999999999999999"],
    ["--journal-size-limit", "9223372036854775808"],
    ["--pragma", "x=1; DROP TABLE t"],
]


@pytest.mark.parametrize("args", BAD_SETTINGS, ids=lambda args: args[0])
def test_settings_the_engine_refuses_are_refused_before_anything_is_made(tmp_path, capsys, args):
    # The engine read them once the output directory and the scratch directory were made:
    # a refused run left OUT with its RUNNING mark (found by the CLI fuzz).
    out, scratch = tmp_path / "out", tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(SystemExit) as exit:
        main(["run", "-n", "2", *args, "--dir", str(scratch), "--out", str(out)])
    assert exit.value.code == 2 and capsys.readouterr().err.startswith("sqlwa: error: ")
    assert not out.exists() and list(scratch.iterdir()) == []


@pytest.mark.root
@pytest.mark.parametrize("args", BAD_SETTINGS, ids=lambda args: args[0])
def test_a_lab_run_with_bad_settings_makes_no_lab(tmp_path, args):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sqlwa", "run", "--fs", "ext4", "-n", "2", *args, "--out", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.startswith("sqlwa: error: "), err
    assert not out.exists() and not sqlwa_leftovers(proc.pid)


def test_the_trace_buffer_the_loss_hint_names_is_an_option():
    buffer = next(param for param in run.params if param.name == "buffer_kb")
    assert "--buffer-kb" in buffer.opts
    assert CliRunner().invoke(run, ["--buffer-kb", "1"]).exit_code == 2  # below the 64 KiB floor


def test_no_help_text_shows_a_doubled_percent_sign():
    """click prints help text as written: "PCT%%" reached users as is (#16, point 14)."""
    import click
    from click.testing import CliRunner

    from sqlwa.cli import _group

    def commands(group, path):
        # click's lookup, not group.commands: the top group imports its commands on demand
        context = click.Context(group)
        for name in group.list_commands(context):
            yield [*path, name]
            command = group.get_command(context, name)
            if isinstance(command, click.Group):
                yield from commands(command, [*path, name])

    for argv in commands(_group, []):
        result = CliRunner().invoke(_group, [*argv, "--help"])
        assert result.exit_code == 0 and "%%" not in result.output, (argv, result.output)


DEVICE_DELAY_REFUSALS = [
    # dm-crypt and dm-delay are refused together wherever the run would be, before a guest boots
    (["--vm", "--crypt", "dm-crypt", "--device-delay", "10"], "--device-delay and --crypt dm-crypt are two"),
    (["--vm", "--device-delay", "10001"], "Invalid value for '--device-delay'"),
]


@pytest.mark.parametrize("args, message", DEVICE_DELAY_REFUSALS, ids=["with-crypt", "too-long"])
def test_a_device_delay_the_run_cannot_have_is_one_line_and_makes_nothing(tmp_path, args, message):
    out = tmp_path / "out"
    command = [sys.executable, "-m", "sqlwa", "run", "-n", "2", *args, "--out", str(out)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not out.exists()


def test_device_delay_on_tmpfs_is_unsupported_and_a_host_without_device_mapper_says_add_vm():
    from sqlwa import _system
    from sqlwa.errors import UnsupportedFilesystem, UsageError
    from sqlwa.lab.layers.dmdelay import check_delay

    with pytest.raises(UnsupportedFilesystem, match="tmpfs has no block device to delay"):
        check_delay(10, "none", "tmpfs", has_device=False)
    if not _system.dm.device_mapper_available():
        with pytest.raises(
            UsageError, match=r"^--device-delay needs device-mapper, which this kernel lacks; add --vm$"
        ):
            check_delay(10, "none", "ext4", has_device=True)


# A host whose kernel has ext4 only: every other lab filesystem is one the VM lab's
# Debian kernel has (f2fs, xfs, btrfs, ecryptfs as modules), so its fix line is --vm.
LACKING_HOST_RUNS = [["--fs", "f2fs"], ["--fs", "xfs"], ["--fs", "btrfs"], ["--fs", "ecryptfs"]]
LACKING_HOST_RUNS += [["--profile", "android-f2fs"]]


@pytest.mark.parametrize("args", LACKING_HOST_RUNS, ids=lambda args: args[1])
def test_a_filesystem_the_host_kernel_lacks_is_refused_with_the_vm_lab_as_the_fix(tmp_path, monkeypatch, args):
    from helpers import sqlwa_in_process
    from sqlwa import _system

    monkeypatch.setattr(_system.mounts, "kernel_filesystems", lambda: {"ext4", "tmpfs"})
    monkeypatch.setattr(_system.processes, "is_root", lambda: True)
    monkeypatch.setattr(_system.tools, "try_tool", lambda *a, **kw: None)  # modprobe finds nothing
    out = tmp_path / "out"
    proc = sqlwa_in_process("run", "-n", "2", *args, "--out", str(out))
    error, fix = proc.stderr.splitlines()
    assert proc.returncode == 2 and error.startswith("sqlwa: error: ") and "no " in error, proc.stderr
    assert fix.startswith("  fix: add --vm"), proc.stderr
    assert not out.exists()


def test_a_layer_the_host_kernel_lacks_is_refused_with_the_vm_lab_as_the_fix(tmp_path, monkeypatch):
    """fscrypt and FUSE are in the VM lab's Debian kernel too (as is every lab filesystem)."""
    import os

    from helpers import sqlwa_in_process
    from sqlwa import _system

    monkeypatch.setattr(_system.processes, "is_root", lambda: True)
    real_exists = os.path.exists
    monkeypatch.setattr(os.path, "exists", lambda p: False if "/features/encryption" in str(p) else real_exists(p))
    monkeypatch.setattr(_system.mounts, "kernel_filesystems", lambda: {"ext4", "tmpfs"})  # no fuse either
    for args in (["--encrypt", "fscrypt"], ["--fuse", "passthrough"]):
        proc = sqlwa_in_process("run", "-n", "2", "--fs", "ext4", *args, "--out", str(tmp_path / "out"))
        assert proc.returncode == 2 and proc.stderr.splitlines()[1].startswith("  fix: add --vm"), proc.stderr
        assert not (tmp_path / "out").exists()

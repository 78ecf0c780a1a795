"""``adb devices -l`` read as adb writes it, and the device a run goes to chosen from it.

The listings are in the form AOSP's adb server prints them (adb/transport.cpp,
``append_transport``: the serial padded to 22, the state, the USB path without a key,
then product:, model:, device:, transport_id:; a USB device the user may not open is in
the state ``UsbNoPermissionsShortHelpText()``, with blanks and a bracketed URL).
"""

from __future__ import annotations

import pytest

from sqlwa.errors import DeviceError, UsageError
from sqlwa.phone import adb

LISTING = (
    "* daemon not running; starting now at tcp:5037\n"
    "* daemon started successfully\n"
    "List of devices attached\n"
    "0A1B2C3D4E5F           device usb:1-1 product:oriole model:Pixel_6 device:oriole transport_id:3\n"
    "emulator-5554          unauthorized transport_id:1\n"
    "HT7A1B2C3D             no permissions (user alice is not in the plugdev group); "
    "see [http://developer.android.com/tools/device.html] usb:2-4 transport_id:2\n"
    "192.168.1.20:5555      offline product:beyond1 model:SM_G973F device:beyond1 transport_id:4\n"
    "\n"
)


def test_every_state_and_detail_is_read_as_adb_wrote_it():
    devices = adb.parse_devices(LISTING)
    assert [(d.serial, d.state) for d in devices] == [
        ("0A1B2C3D4E5F", "device"),
        ("emulator-5554", "unauthorized"),
        ("HT7A1B2C3D", "no permissions"),
        ("192.168.1.20:5555", "offline"),
    ]
    assert devices[0].details == {
        "usb": "1-1",
        "product": "oriole",
        "model": "Pixel_6",
        "device": "oriole",
        "transport_id": "3",
    }
    assert devices[2].details == {"usb": "2-4", "transport_id": "2"}
    assert devices[0].label == "0A1B2C3D4E5F (Pixel_6)"


def test_the_named_device_is_chosen_among_several():
    devices = adb.parse_devices(LISTING)
    assert adb.choose(devices, "0A1B2C3D4E5F").serial == "0A1B2C3D4E5F"


@pytest.mark.parametrize(
    ("serial", "error", "says", "fix"),
    [
        (None, UsageError, "4 devices are attached (0A1B2C3D4E5F (Pixel_6), emulator-5554,", "--adb SERIAL"),
        ("R58M", UsageError, "no device R58M is attached (attached: 0A1B2C3D4E5F (Pixel_6),", "adb devices"),
        (
            "emulator-5554",
            DeviceError,
            "device emulator-5554 is not ready for commands (adb lists it as unauthorized)",
            "Allow USB debugging",
        ),
        ("HT7A1B2C3D", DeviceError, "(adb lists it as no permissions)", "plugdev"),
        (
            "192.168.1.20:5555",
            DeviceError,
            "device 192.168.1.20:5555 (SM_G973F) is not ready for commands (adb lists it as offline)",
            "reconnect",
        ),
    ],
)
def test_each_way_a_device_cannot_be_had_is_one_line_and_its_fix(serial, error, says, fix):
    with pytest.raises(error) as raised:
        adb.choose(adb.parse_devices(LISTING), serial)
    message, hint = raised.value.args
    assert says in message and "\n" not in message
    assert fix in hint


def test_no_device_says_how_to_attach_one():
    with pytest.raises(UsageError, match=r"^no Android device is attached \(adb devices lists none\)$"):
        adb.choose(adb.parse_devices("List of devices attached\n\n"), None)

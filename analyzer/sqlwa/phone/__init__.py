"""The phone: an Android device sqlwa measures on over adb (``--adb``), without root.

- :mod:`.adb`: the device chosen and reached through Android's own ``adb`` client.
"""

"""The device/backend stack every datapath shares."""

"""Errors the controller's callers tell apart, shared by the controller process and
the broker code that calls it in-process or through forwarding."""


class NotControllerError(Exception):
    """This node is not (or stopped being) the active controller."""

"""Stub ``vllm.logger.init_logger`` (vllm/logger.py): a logger whose messages the harness keeps."""

from mla_spec_stub import STATE, strict

__getattr__ = strict("vllm.logger")


class _Logger:
    def __init__(self, name: str) -> None:
        self.name = name

    def _keep(self, level: str, msg: str, *args, **kwargs) -> None:
        try:
            text = msg % args if args else str(msg)
        except (TypeError, ValueError):
            text = str(msg)
        STATE.events.append({"log": level, "message": text})

    def warning_once(self, msg, *args, **kwargs):
        self._keep("warning", msg, *args)

    def warning(self, msg, *args, **kwargs):
        self._keep("warning", msg, *args)

    def info_once(self, msg, *args, **kwargs):
        self._keep("info", msg, *args)

    def info(self, msg, *args, **kwargs):
        self._keep("info", msg, *args)

    def debug(self, msg, *args, **kwargs):
        pass

    def debug_once(self, msg, *args, **kwargs):
        pass


def init_logger(name: str) -> _Logger:
    return _Logger(name)

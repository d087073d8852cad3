"""The desktop app (PySide6). `MainWindow` is imported on first use, so `import fp16studio.gui`
stays cheap and never pulls in torch."""

__all__ = ["MainWindow"]


def __getattr__(name):
    if name == "MainWindow":
        from .main_window import MainWindow

        return MainWindow
    raise AttributeError(name)

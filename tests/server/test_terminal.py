import io

from server.terminal import for_terminal


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_codes_go_to_a_terminal_only(monkeypatch):
    line = "\x1b[92mINFO \x1b[0m:      round 1\n"
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert for_terminal(line) == "INFO :      round 1\n"
    monkeypatch.setattr("sys.stdout", Tty())
    assert for_terminal(line) == line

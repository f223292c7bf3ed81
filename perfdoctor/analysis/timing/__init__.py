"""Where each step's time goes: device and host breakdowns, kernel and op classes, source lines, compiled regions."""

"""``format`` as regular expressions (ECMA-262 syntax, fully anchored) for ``enforce="all"``.

Each format is the language of its RFC, made regular: ``date`` with the days of each month and February 29 only in
leap years (RFC 3339 ``full-date``), ``time`` (``full-time``; a leap second only as 23:59:60 with a zero offset: the other local times of a leap second
are refused),
``date-time``, ``duration`` (RFC 3339 appendix A), ``email`` (RFC 5321 dot-atom or quoted local part; a host name or
an address literal), ``hostname`` (RFC 1123 labels of 1-63 letters, digits and inner hyphens), ``ipv4`` (no leading
zeros), ``ipv6`` (RFC 4291 text forms, with ``::`` and an IPv4 tail), ``uri`` and ``uri-reference`` (RFC 3986),
``uuid`` (RFC 4122, any version). ``NOT_CHECKED`` names what the language leaves out on purpose (stricter or looser
than the RFC), for the report.

Example:
    >>> import re
    >>> bool(re.fullmatch(FORMATS["date"][1:-1], "2024-02-29")), bool(re.fullmatch(FORMATS["date"][1:-1], "2023-02-29"))
    (True, False)
"""

from __future__ import annotations

import functools

from .regex import DFA, compile_pattern, minimise

_D = "[0-9]"
_MONTH31 = "(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
_MONTH30 = "(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
_FEB = "02-(?:0[1-9]|1[0-9]|2[0-8])"
_LEAP_YEAR = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
DATE = f"(?:[0-9]{{4}}-(?:{_MONTH31}|{_MONTH30}|{_FEB})|{_LEAP_YEAR}-02-29)"


_OFFSET = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_TIME_NO_LEAP = f"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]+)?{_OFFSET}"
TIME = f"(?:{_TIME_NO_LEAP}|23:59:60(?:\\.[0-9]+)?(?:[Zz]|[+-]00:00))"
DATE_TIME = f"{DATE}[Tt]{TIME}"

_DUR_TIME = "T(?:[0-9]+H(?:[0-9]+M(?:[0-9]+S)?)?|[0-9]+M(?:[0-9]+S)?|[0-9]+S)"
_DUR_DATE = "(?:[0-9]+Y(?:[0-9]+M(?:[0-9]+D)?)?|[0-9]+M(?:[0-9]+D)?|[0-9]+D)"
DURATION = f"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|[0-9]+W)"

_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = f"{_LABEL}(?:\\.{_LABEL})*"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
IPV4 = f"{_OCTET}(?:\\.{_OCTET}){{3}}"


def _ipv6() -> str:
    h = "[0-9A-Fa-f]{1,4}"
    alts = []
    for total, tail in ((8, ""), (6, IPV4)):
        sep_tail = (":" + tail) if tail else ""
        alts.append(f"(?:{h}:){{{total - 1}}}{h}{sep_tail}" if total > 1 else h)
        for left in range(0, total):
            for right in range(0, total - left):  # "::" stands for at least one group
                lpart = f"(?:{h}:){{{left - 1}}}{h}" if left else ""
                if right:
                    rpart = f"{h}(?::{h}){{{right - 1}}}" + sep_tail
                else:
                    rpart = tail
                alts.append(f"{lpart}::{rpart}")
    return "(?:" + "|".join(alts) + ")"


IPV6 = _ipv6()
UUID = "[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"

_ATEXT = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]"
_QTEXT = "(?:[\\x20\\x21\\x23-\\x5B\\x5D-\\x7E]|\\\\[\\x20-\\x7E])"
EMAIL = (f"(?:{_ATEXT}+(?:\\.{_ATEXT}+)*|\"{_QTEXT}*\")@"
         f"(?:{HOSTNAME}|\\[{IPV4}\\]|\\[IPv6:{IPV6}\\])")

# RFC 3986
_UNRES = "[A-Za-z0-9._~-]"
_PCT = "%[0-9A-Fa-f]{2}"
_SUBD = "[!$&'()*+,;=]"
_PCHAR = f"(?:{_UNRES}|{_PCT}|{_SUBD}|[:@])"
_SCHEME = "[A-Za-z][A-Za-z0-9+.-]*"
_USERINFO = f"(?:{_UNRES}|{_PCT}|{_SUBD}|:)*"
_REGNAME = f"(?:{_UNRES}|{_PCT}|{_SUBD})*"
_IPFUTURE = f"[vV][0-9A-Fa-f]+\\.(?:{_UNRES}|{_SUBD}|:)+"
_HOST = f"(?:\\[(?:{IPV6}|{_IPFUTURE})\\]|{IPV4}|{_REGNAME})"
_AUTHORITY = f"(?:{_USERINFO}@)?{_HOST}(?::[0-9]*)?"
_SEGMENT = f"{_PCHAR}*"
_SEGMENT_NZ = f"{_PCHAR}+"
_SEGMENT_NZ_NC = f"(?:{_UNRES}|{_PCT}|{_SUBD}|@)+"
_PATH_ABEMPTY = f"(?:/{_SEGMENT})*"
_PATH_ABSOLUTE = f"/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
_PATH_ROOTLESS = f"{_SEGMENT_NZ}(?:/{_SEGMENT})*"
_PATH_NOSCHEME = f"{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*"
_QUERY = f"(?:{_PCHAR}|[/?])*"
_TAIL = f"(?:\\?{_QUERY})?(?:#{_QUERY})?"
URI = f"{_SCHEME}:(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_ROOTLESS}|){_TAIL}"
_RELATIVE = f"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_PATH_NOSCHEME}|){_TAIL}"
URI_REFERENCE = f"(?:{URI}|{_RELATIVE})"

FORMATS: dict[str, str] = {name: f"^{rx}$" for name, rx in {
    "date": DATE, "time": TIME, "date-time": DATE_TIME, "duration": DURATION, "email": EMAIL,
    "hostname": HOSTNAME, "ipv4": IPV4, "ipv6": IPV6, "uri": URI, "uri-reference": URI_REFERENCE, "uuid": UUID,
}.items()}
"""Format name -> anchored pattern of the strings it accepts."""

NOT_CHECKED: dict[str, str] = {
    "hostname": "the total length limit of 253 and the punycode of A-labels are not checked",
    "email": "the host part's total length is not checked",
}
"""What a format's language does not check (reported as unenforced)."""


@functools.cache
def format_dfa(name: str) -> DFA:
    """The minimal automaton of a format in ``FORMATS`` (one per format and process: the formats are fixed, and
    intersections with the minimal automaton stay small)."""
    return minimise(compile_pattern(FORMATS[name]))

#!/usr/bin/env python3
"""Generates jsregex_cases.json: (pattern, flags, subject) triples, never expected results.

The expected results come from Node at test time (see ../jsregex_differential.rs).
"""
import json

cases = []


def add(pattern, flags, *subjects):
    for s in subjects or [""]:
        cases.append([pattern, flags, s])


# Real-life subject patterns.
add(r"^Reset your password$", "", "Reset your password", "Reset your password!", "reset your password")
add(r"^Reset your password$", "i", "reset YOUR password")
add(r"Order #\d+ confirmed", "", "Your Order #12345 confirmed", "Order # confirmed", "Order #٣ confirmed")
add(r"(?<code>\d{6})", "", "Your code is 123456", "Your code is 12345")
add(r"welcome|bienvenue", "", "Bienvenue!", "bienvenue chez nous", "Welcome")
add(r"welcome|bienvenue", "i", "Bienvenue!", "WELCOME aboard")
add(r"^\[JIRA\] \(PROJ-\d+\)", "", "[JIRA] (PROJ-42) Bug", "[JIRA] PROJ-42")
add(r"Invoice\s+#?(\d{4,})", "", "Invoice  #20240", "Invoice #12")
add(r"^(Re|Fwd?):\s*", "i", "RE: hello", "fw: x", "Fwd:x", "Reply: x")
add(r"\bverify\b", "i", "Please verify your email", "unverifyable")
add(r"[A-Z]{2}-\d{3}", "", "Ticket AB-123", "Ticket ab-123")
add(r"^\S+@\S+\.\w+$", "", "a@b.co", "a b@c.d")
add(r"your (?:account|profile) (?:was|has been) (?:created|updated)", "", "your profile has been updated", "your account was deleted")
add(r"\$\d+(?:\.\d{2})?", "", "Total $12.50", "Total 12.50")
add(r"^Bestellung Nr\. \d+ – bestätigt$", "", "Bestellung Nr. 42 – bestätigt")
add(r"注文|ご注文", "", "ご注文ありがとうございます", "ありがとう")
add(r"^🎉 .+ 🎉$", "", "🎉 Party 🎉", "🎉  🎉")
add(r"^🎉 .+ 🎉$", "u", "🎉 Party 🎉")

# Invalid patterns (SyntaxError in JS).
for p in ["(", ")", "[", "*a", "a**", "+", "?", "a|*", "(?<n>a)(?<n>b)", r"\k<x>(?<y>a)",
          "(?<=a)*", "(?<!a)+", "\\", "a{2,1}", "(?i:a)", "(?<>a)", "(?<1a>x)", "(?x)", "[b-a]",
          "^*", "$+", r"\b*", "(?:", "a)", "((a)", "{1}", "x{1}{2}", "a{1}?{1}", "(?P<n>a)",
          "[z-a]", "a???", "(?<a-b>x)"]:
    add(p, "", "a")
for p in ["{1}", "a{", "a}", "]", "}", r"\a", r"\-", r"\1", r"(a)\2", r"\00", r"\8", r"\u{110000}",
          r"\uZZZZ", r"\xZ", r"\c1", r"\c", r"[\d-z]", r"\p{Foo}", r"\p{L", r"\p{Script=Foo}",
          r"\p{script=Greek}", r"\p{l}", r"\P", r"(?=a)*", r"[\B]", r"\k", r"\k<a>", r"\q", "a{1,x}",
          r"\p{RGI_Emoji}", r"[\1]", r"\p{General_Category}"]:
    add(p, "u", "a")
for p in ["[a-z&&b]", "[(]", "[a--]", "[a&&&b]", "[[a]&&[b]--[c]]", r"[^\q{ab}]", "[a|b]",
          "[a!!b]", r"\P{RGI_Emoji}", "[a-z--b-c]", "[{]", "[]]", "[a-]"]:
    add(p, "v", "a")

# Flags.
for f in ["x", "gg", "uv", "ii", "G", "I", "gimsuyd", "dgimsvy", "n", " ", "gu v", "yy", "mm", "ss", "dd", "vv"]:
    add("a", f, "a")
for f in ["", "g", "d", "y", "gy", "gi", "dgimsy"]:
    add("b", f, "abc")

# Annex B braces and literals.
add("a{", "", "a{", "a")
add("a{1", "", "a{1")
add("a{1,", "", "a{1,")
add("a{,1}", "", "a{,1}", "a")
add("a{x}", "", "a{x}")
add("^}$", "", "}")
add("^]$", "", "]")
add("x{2,3}", "", "xx", "x")
add("^x{2,3}$", "", "xxxx", "xxx")
add("^x{2,}?$", "", "xxxxx")
add("^x{0}$", "", "", "x")
add("^a{1,3}?b", "", "aaab", "aaaab")
add(r"^\u{3}$", "", "uuu", "\u0003")
add(r"^\u{3}$", "u", "uuu", "\u0003")
add(r"^\u{1F600}$", "u", "😀")
add(r"^\u{1F600}$", "", "😀", "u" * 0x1F600 if False else "u{1F600}")
add(r"^\u{1F600}$", "v", "😀")
add(r"^\p{L}$", "", "p{L}", "a")
add(r"^\P{L}$", "", "P{L}")

# Identity escapes, control, hex, octal.
add(r"^\a\e\g\/\-\ $", "", "aeg/- ")
add(r"^\/$", "u", "/")
add(r"^\cJ$", "", "\n")
add(r"^\cj$", "", "\n")
add(r"^\c1$", "", "\\c1")
add(r"^[\c1]$", "", "\u0011", "c")
add(r"^[\c_]$", "", "\u001f")
add(r"^[\c*]+$", "", "\\c*")
add(r"^\0$", "", "\0")
add(r"^\0$", "u", "\0")
add(r"^\00$", "", "\0")
add(r"^\01$", "", "\u0001")
add(r"^\08$", "", "\u00008")
add(r"^\1$", "", "\u0001")
add(r"^\12$", "", "\n")
add(r"^\377$", "", "\u00ff")
add(r"^\400$", "", "\u00200")
add(r"^\8\9$", "", "89")
add(r"^(a)\2$", "", "a\u0002")
add(r"^(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)\10$", "", "abcdefghijj", "abcdefghija0")
add(r"^(a)\10$", "", "a\u0008")
add(r"^\x41$", "", "A")
add(r"^\x4$", "", "x4")
add(r"^\x4G$", "", "x4G")
add(r"^\u0041$", "", "A")
add(r"^\u0041$", "u", "A")
add(r"^\u004$", "", "u004")
add(r"^\uD83D\uDE00$", "", "😀")
add(r"^\uD83D\uDE00$", "u", "😀")
add(r"^\uD83D", "", "😀")
add(r"^\uD83D", "u", "😀")
add(r"^[\uD83D\uDE00]$", "u", "😀")
add(r"^[\uD83D\uDE00]$", "", "😀")
add(r"^[\uD83D\uDE00]{2}$", "", "😀")
add(r"^[😀]$", "", "😀")
add(r"^[😀]$", "u", "😀")
add(r"^😀{2}$", "", "😀😀", "😀\U0001F600")
add(r"^😀{2}$", "u", "😀😀")
add(r"^[^a]$", "", "😀")
add(r"^[^a]$", "u", "😀")
add(r"^[\u0000-\uFFFF]+$", "", "😀")
add(r"^[\u0000-\uFFFF]$", "u", "😀")
add(r"\k", "", "k")
add(r"^\k<a>$", "", "k<a>")
add(r"(?<a>x)\k<a>", "", "xx")
add(r"^[\b]$", "", "\b")
add(r"^[\B]$", "", "B")
add(r"^[\-]$", "u", "-")
add(r"^[\d-z]+$", "", "1-z", "a")

# Character class escapes.
for cls in [r"\d", r"\D", r"\w", r"\W", r"\s", r"\S"]:
    for f in ["", "u", "i", "iu"]:
        add("^" + cls + "$", f, "5", "٣", "a", "é", "_", " ", "\u00a0", "\ufeff", "\u2028", "\u200b", "\u180e", "\u3000", "\u0085", "ſ", "\u212a")
add(r"^\w+$", "", "héllo")
add(r"^\s+$", "", "\t\n\u000b\f\r \u1680\u2000\u200a\u202f\u205f")
add(r"^[\w-]+$", "", "a-b_c")
add(r"^[^\d\s]+$", "", "abc", "ab c")
add(r"^[\W\d]$", "", "5", "a", "!")

# \b \B
add(r"\bfoo\b", "", "a foo b", "afoob", "éfooé", "_foo")
add(r"\Bfoo", "", "afoo", "foo")
add(r"\bé", "", "é", "aé")
add(r"\bſ", "iu", "aſ", "ſ")
add(r"\bk", "iu", "\u212a")
add(r"a\B", "iu", "a\u212a", "ab")

# [^] and []
add(r"^[^]$", "", "\n", "😀", "a")
add(r"^[^]$", "u", "😀")
add(r"[]", "", "", "a")
add(r"^[]*$", "", "")
add(r"a[]?b", "", "ab")
add(r"[^]*", "", "")

# . and s
for f in ["", "s", "u", "su", "m"]:
    add(r"^a.b$", f, "a\nb", "a\rb", "a\u2028b", "a\u2029b", "a\u0085b", "axb", "a\tb", "a😀b")

# ^ $ and m
for f in ["", "m"]:
    add(r"^b", f, "a\nb", "a\rb", "a\u2028b", "a\u2029b", "a\r\nb", "b")
    add(r"a$", f, "a\nb", "a\rb", "a\u2028b", "a\r\nb", "a\n", "a")
    add(r"^$", f, "", "\n", "a\r\nb", "ab")
    add(r"^\r$", f, "a\r\nb")
add(r"x$", "", "x\n")
add(r"^a$^b$", "m", "a\nb")
add(r"a$\nb", "m", "a\nb")
add(r"^(?:a|^b)", "m", "xb", "x\nb")

# Case folding.
for f in ["i", "iu", "iv", ""]:
    add("^ß$", f, "ß", "ẞ", "SS", "ss")
    add("^ẞ$", f, "ß")
    add("^Σ$", f, "σ", "ς")
    add("^ς$", f, "Σ", "σ")
    add("^k$", f, "K", "\u212a")
    add("^\u212a$", f, "k", "K")
    add("^s$", f, "ſ", "S")
    add("^ſ$", f, "s", "S")
    add("^i$", f, "İ", "ı", "I")
    add("^İ$", f, "i", "I")
    add("^ı$", f, "I", "i")
    add("^[a-z]+$", f, "ABC", "ſ", "\u212a")
    add("^[^a-z]$", f, "A", "ſ")
    add("^ω$", f, "Ω", "\u2126")
    add("^µ$", f, "μ", "Μ")
    add("^ǅ$", f, "Ǆ", "ǆ")
    add("^ΐ$", f, "\u1fd3")
    add("^\u1e9e$", f, "ss")
    add("^ﬀ$", f, "FF")
    add("^é$", f, "É")
    add("^[À-Þ]$", f, "é")
    add("^𐐀$", f, "𐐨")
    add(r"^\W$", f, "ſ", "\u212a", "S")
add("^[^σ]$", "i", "ς")
add("^[\u0100-\u017f]$", "i", "s", "k")

# Groups, named groups, alternatives.
add(r"^(?:)$", "", "")
add(r"^(|a)$", "", "", "a")
add(r"^a|b$", "", "ac", "cb", "cbc")
add(r"^(?:a|)+$", "", "aaa")
add(r"^(?<first>\w+) (?<last>\w+)$", "", "John Smith")
add(r"^(?<$x>a)(?<_y>b)$", "", "ab")
add(r"^(?<é>a)\k<é>$", "", "aa")
add(r"^(?<\u0061>a)\k<a>$", "", "aa")
add(r"^(?<a>.)\k<a>$", "u", "😀😀", "😀🙂")

# Backreferences.
add(r"^(a+)\1$", "", "aaaa", "aaa")
add(r"^(\w+)\s\1$", "", "hello hello", "hello world")
add(r"^(a)\1$", "i", "aA")
add(r"^(ß)\1$", "i", "ßẞ")
add(r"^(ſ)\1$", "i", "ſs")
add(r"^(ſ)\1$", "iu", "ſs")
add(r"^\1(a)$", "", "a")
add(r"^(a\1)$", "", "a")
add(r"^(?:(a)|b)\1$", "", "b", "aa", "ba")
add(r"^(?<q>['\"]).*\k<q>$", "", "'abc'", "'abc\"")
add(r"^(?:(a)|(b))+\1\2$", "", "ab", "aba", "abab")
add(r"^(a)?\1$", "", "", "aa", "a")
add(r"^(.)\1$", "", "😀😀")
add(r"^(.)\1$", "u", "😀😀")
add(r"^(?:(a)|b)*\1$", "", "ab", "aba")

# Lookaround.
add(r"foo(?=bar)", "", "foobar", "foobaz")
add(r"foo(?!bar)", "", "foobar", "foobaz")
add(r"(?<=\$)\d+", "", "$42", "42")
add(r"(?<!\$)\b\d+", "", "$42", "x 42")
add(r"(?<=^|,)x", "", "x", "a,x", "ax")
add(r"(?<=ab|c)d", "", "abd", "cd", "bd")
add(r"(?<=a+)b", "", "aab", "b")
add(r"(?<=\d{3})x", "", "123x", "12x")
add(r"^(?=.*\d)(?=.*[a-z]).{6,}$", "", "abc123", "abcdef")
add(r"(?=a)*b", "", "b")
add(r"(?=a){2}a", "", "a")
add(r"^(?!.*spam).*$", "i", "hello", "SPAM offer")
add(r"(?<=(a))\1", "", "aa")
add(r"(?<![a-z])\d", "", "a1", "-1")

# Quantifiers.
add(r"^a*?$", "", "aaa")
add(r"^a+?b$", "", "aab")
add(r"^(ab){2}$", "", "abab", "ab")
add(r"^a{,2}$", "", "a{,2}")
add(r"^(?:a{2}){2}$", "", "aaaa")
add(r"^a{0,3}b{1,}$", "", "aaab", "aaaab")
add(r"^.{5}$", "", "😀😀", "😀😀x")
add(r"^.{5}$", "u", "😀😀😀😀😀")
add(r"^(a|ab)(c|bcd)(d*)$", "", "abcd")
add(r"^(a*)*$", "", "aaaa")
add(r"^(a*)+b$", "", "aaab")
add(r"x{99999999999}", "", "x")

# Unicode properties.
add(r"^\p{L}+$", "u", "héllo", "abc1", "日本語")
add(r"^\p{Lu}$", "u", "A", "a")
add(r"^\P{L}$", "u", "1", "a")
add(r"^\p{Letter}$", "u", "ä")
add(r"^\p{gc=Nd}+$", "u", "123٣")
add(r"^\p{General_Category=Decimal_Number}$", "u", "5")
add(r"^\p{Script=Greek}+$", "u", "αβγ", "abc")
add(r"^\p{sc=Grek}$", "u", "Ω")
add(r"^\p{Script_Extensions=Latin}$", "u", "a")
add(r"^\p{scx=Hira}$", "u", "あ")
add(r"^\p{Script=Han}+$", "u", "漢字", "かな")
add(r"^\p{Emoji}$", "u", "😀", "a")
add(r"^\p{Emoji_Presentation}$", "u", "😀")
add(r"^\p{Extended_Pictographic}$", "u", "❤")
add(r"^\p{ASCII}+$", "u", "abc", "é")
add(r"^\p{Any}$", "u", "😀")
add(r"^\p{Alpha}$", "u", "a")
add(r"^\p{White_Space}$", "u", "\u0085")
add(r"^\p{Lowercase}$", "iu", "A")
add(r"^\p{Lu}$", "iu", "a")
add(r"^\P{Lu}$", "iu", "A", "a")
add(r"^[\p{L}\p{N}]+$", "u", "abc123")
add(r"^\p{M}$", "u", "\u0301")
add(r"^e\p{M}*$", "u", "e\u0301", "é")
add(r"^\p{Script=Beria_Erfe}$", "u", "a")
add(r"^\p{Cs}$", "u", "a")

# Combining marks, CJK, emoji.
add(r"^.$", "", "é", "e\u0301", "日")
add(r"^..$", "", "e\u0301")
add(r"^日本$", "", "日本")
add(r"^[日本]+$", "", "本日")
add(r"^.$", "u", "👍🏽")
add(r"^..$", "u", "👍🏽")
add(r"^....$", "", "👍🏽")
add(r"^[👍🏽]+$", "u", "👍🏽")
add(r"^\S+$", "", "😀")
add(r"^[^\s]{2}$", "", "😀")

# v flag.
add(r"^[\p{L}--[a-z]]$", "v", "A", "a")
add(r"^[[a-z]&&[aeiou]]+$", "v", "aei", "abc")
add(r"^[\q{abc|d}]$", "v", "abc", "d", "ab")
add(r"^[\q{abc|d}x]+$", "v", "abcdx")
add(r"^[a-c\q{xy}]$", "v", "xy", "b")
add(r"^[\w--\d]+$", "v", "abc", "a1")
add(r"^[[^a]&&[a-c]]$", "v", "b", "a")
add(r"^[^[a-z]--[b]]$", "v", "b", "a")
add(r"^[\&]$", "v", "&")
add(r"^[a&b]$", "v", "&")
add(r"^\p{L}$", "v", "é")
add(r"^[\q{AbC}]$", "iv", "abc")
add(r"^[^a]$", "iv", "A", "b")
add(r"^\u{1F600}$", "v", "😀")

# Properties of strings (v flag only; core/tests/jsregex_differential.rs also checks every
# sequence of the table): a sequence is matched whole, the longest first.
emoji = ["👍🏽", "👍", "☺", "☺\ufe0f", "1\ufe0f\u20e3", "1\u20e3", "#\ufe0f\u20e3", "🇫🇷", "🇦🇦",
         "🏴\U000E0067\U000E0062\U000E0065\U000E006E\U000E0067\U000E007F", "🏴", "👩\u200d❤\ufe0f\u200d💋\u200d👨",
         "👩\u200d❤\u200d💋\u200d👨", "🧑🏻\u200d🤝\u200d🧑🏼", "🧑🏻\u200d🤝\u200d🧑🏻", "👨\u200d👩\u200d👧\u200d👦",
         "👨\u200d👩", "🏳\ufe0f\u200d🌈", "🫩", "🫯", "Ⓜ\ufe0f", "ⓜ\ufe0f", "a", "🏻", "🇫"]
for prop in ["RGI_Emoji", "Basic_Emoji", "Emoji_Keycap_Sequence", "RGI_Emoji_Modifier_Sequence",
             "RGI_Emoji_Flag_Sequence", "RGI_Emoji_Tag_Sequence", "RGI_Emoji_ZWJ_Sequence"]:
    add("^\\p{" + prop + "}$", "v", *emoji)
    add("\\P{" + prop + "}", "v", "a")
    add("[^\\p{" + prop + "}]", "v", "a")
    add("\\p{" + prop + "}", "u", "a")
    add("\\p{" + prop + "}", "", "p{" + prop + "}")
add(r"^\p{RGI_Emoji}$", "iv", "Ⓜ\ufe0f", "ⓜ\ufe0f", "👍🏽")
add(r"^\p{RGI_Emoji}+$", "v", "👍🏽👨\u200d👩\u200d👧\u200d👦🇫🇷", "👍🏽a")
add(r"^\p{RGI_Emoji}{2}$", "v", "👨\u200d👩\u200d👧\u200d👦🇫🇷", "👨\u200d👩\u200d👧\u200d👦")
add(r"^[\p{RGI_Emoji}a-c]+$", "v", "a👍🏽b", "a👍🏽d")
add(r"^[\p{RGI_Emoji}--\p{RGI_Emoji_Modifier_Sequence}]$", "v", "👍🏽", "👍")
add(r"^[\p{RGI_Emoji}--\q{👍🏽|👍}]$", "v", "👍🏽", "👍", "👎")
add(r"^[\p{RGI_Emoji}&&\p{RGI_Emoji_Flag_Sequence}]$", "v", "🇫🇷", "👍")
add(r"^[\p{RGI_Emoji_Flag_Sequence}&&[\q{🇫🇷}a]]$", "v", "🇫🇷", "🇩🇪")
add(r"^[\p{Basic_Emoji}&&\p{Emoji_Presentation}]$", "v", "😀", "☺\ufe0f")
add(r"^(?:\p{RGI_Emoji}|x)$", "v", "x", "🇩🇪")
add(r"(?<=a)\p{RGI_Emoji_Flag_Sequence}", "v", "a🇩🇪", "b🇩🇪")
add(r"^(\p{RGI_Emoji})\1$", "v", "🇩🇪🇩🇪", "🇩🇪🇫🇷")
add(r"^[\p{RGI_Emoji}\q{}]$", "v", "", "👍")
add(r"\p{RGI_Emoji}", "v", "text 👨\u200d👩\u200d👧 text", "text only")
add(r"^[\p{RGI_Emoji}\p{L}]$", "v", "é")
# Negated classes that may contain strings, whatever the set operations leave.
for p in [r"[^\p{RGI_Emoji}--\p{RGI_Emoji}]", r"[^\q{ab}--\q{ab}]", r"[^[\p{RGI_Emoji}&&\q{ab}]]",
          r"[^\q{}]", r"[^[^\p{RGI_Emoji}]]", r"\p{RGI_Emoji=Yes}", r"\p{rgi_emoji}", r"\p{RGI_Emoji"]:
    add(p, "v", "a")
add(r"^[^\p{RGI_Emoji}&&\p{L}]$", "v", "a", "1")
add(r"^[^\q{a|b}]$", "v", "a", "c")

# Sticky.
add(r"foo", "y", "foo bar", "a foo")
add(r"a|b", "y", "ba", "cb")
add(r"^a", "y", "a")
add(r"b", "gy", "ab")
add(r"$", "y", "", "a")

with open("jsregex_cases.json", "w", encoding="utf-8") as f:
    json.dump({
        "cases": cases,
        "known_gaps": [
            {"case": [r"^(ſ)\1$", "iu", "ſs"],
             "reason": "case-insensitive backreferences compare with fancy-regex's case folding, which needs equal UTF-8 lengths"},
            {"case": [r"^(?:(a)|(b))+\1\2$", "", "abab"],
             "reason": "JS resets captures on each iteration of a quantified group; fancy-regex keeps the last value"},
            {"case": [r"^(?:(a)|b)*\1$", "", "ab"],
             "reason": "JS resets captures on each iteration of a quantified group; fancy-regex keeps the last value"},
            {"case": [r"^(?:(a)|b)*\1$", "", "aba"],
             "reason": "JS resets captures on each iteration of a quantified group; fancy-regex keeps the last value"},
            {"case": [r"(?<=a+)b", "", "aab"],
             "reason": "variable-length lookbehind: explicit 'not supported' error (fancy-regex needs a fixed length)"},
            {"case": [r"(?<=a+)b", "", "b"],
             "reason": "variable-length lookbehind: explicit 'not supported' error (fancy-regex needs a fixed length)"},
            {"case": [r"x{99999999999}", "", "x"],
             "reason": "repetition counts above 10000: explicit 'not supported' error (automaton size)"},
            {"case": [r"^\p{RGI_Emoji}{2}$", "v", "👨\u200d👩\u200d👧\u200d👦🇫🇷"],
             "reason": "a class with strings compiles to an alternation of its strings: \\p{RGI_Emoji} "
                       "takes 0.9 MiB of the 1 MiB bound on a compiled pattern, twice is 'pattern too large'"},
            {"case": [r"^\p{RGI_Emoji}{2}$", "v", "👨\u200d👩\u200d👧\u200d👦"],
             "reason": "a class with strings compiles to an alternation of its strings: \\p{RGI_Emoji} "
                       "takes 0.9 MiB of the 1 MiB bound on a compiled pattern, twice is 'pattern too large'"},
            {"case": [r"^[\p{RGI_Emoji}\p{L}]$", "v", "é"],
             "reason": "strings beside a large set (over 4096 characters) are not compiled as a trie: "
                       "'pattern too large' with the 3,953 of \\p{RGI_Emoji}"},
            {"case": [r"^\p{Script=Beria_Erfe}$", "u", "a"],
             "reason": "Unicode 17 script unknown to the regex crate's tables: explicit 'not supported' error"},
        ],
    }, f, ensure_ascii=False, indent=0)
print(len(cases), "cases")

//! The Unicode properties of strings (`\p{RGI_Emoji}` and its parts, `v` flag only): the
//! compact table of `emoji_table` expanded into a class of code points and strings.

use super::ast::{ClassValue, merge};
use super::charset::{empty_set, set_of};
use super::emoji_table::{
    BASIC, BASIC_VS16, FLAGS, KEYCAP_BASES, MODIFIER_BASES, TAGS, ZWJ_TEMPLATES,
};

const ZWJ: u32 = 0x200D;
const VS16: u32 = 0xFE0F;
const KEYCAP: u32 = 0x20E3;
const TONES: std::ops::RangeInclusive<u32> = 0x1F3FB..=0x1F3FF;
const REGIONAL_A: u32 = 0x1F1E6;
const BLACK_FLAG: u32 = 0x1F3F4;
const CANCEL_TAG: u32 = 0xE007F;
const TAG_BASE: u32 = 0xE0000;

/// The names, as JS spells them (no aliases, no `=Value`).
pub(super) const NAMES: [&str; 7] = [
    "Basic_Emoji",
    "Emoji_Keycap_Sequence",
    "RGI_Emoji_Modifier_Sequence",
    "RGI_Emoji_Flag_Sequence",
    "RGI_Emoji_Tag_Sequence",
    "RGI_Emoji_ZWJ_Sequence",
    "RGI_Emoji",
];

/// The class a property of strings stands for; `None` for any other name.
pub(super) fn string_property(name: &str) -> Option<ClassValue> {
    if !NAMES.contains(&name) {
        return None;
    }
    let part = |n: &str| name == "RGI_Emoji" || name == n;
    let mut set = empty_set();
    // Each part comes out sorted (the table is in code point order): merged, not sorted.
    let mut strings: Vec<Vec<u32>> = Vec::new();
    if part("Basic_Emoji") {
        set = set_of(BASIC);
        let mut found = Vec::new();
        each(BASIC_VS16, |c| found.push(vec![c, VS16]));
        strings = merge(strings, found);
    }
    if part("Emoji_Keycap_Sequence") {
        let mut found = Vec::new();
        for c in KEYCAP_BASES.bytes() {
            found.push(vec![u32::from(c), VS16, KEYCAP]);
        }
        strings = merge(strings, found);
    }
    if part("RGI_Emoji_Modifier_Sequence") {
        let mut found = Vec::new();
        each(MODIFIER_BASES, |c| {
            for tone in TONES {
                found.push(vec![c, tone]);
            }
        });
        strings = merge(strings, found);
    }
    if part("RGI_Emoji_Flag_Sequence") {
        let mut found = Vec::new();
        for pair in FLAGS.split_ascii_whitespace() {
            let mut flag = Vec::new();
            for letter in pair.bytes() {
                flag.push(REGIONAL_A + u32::from(letter - b'A'));
            }
            found.push(flag);
        }
        strings = merge(strings, found);
    }
    if part("RGI_Emoji_Tag_Sequence") {
        let mut found = Vec::new();
        for tag in TAGS {
            let mut sequence = vec![BLACK_FLAG];
            for letter in tag.bytes() {
                sequence.push(TAG_BASE + u32::from(letter));
            }
            sequence.push(CANCEL_TAG);
            found.push(sequence);
        }
        strings = merge(strings, found);
    }
    if part("RGI_Emoji_ZWJ_Sequence") {
        // Merged in pairs, so that each sequence is moved a logarithmic number of times.
        let mut runs = Vec::new();
        for template in ZWJ_TEMPLATES.split('|') {
            runs.push(expand_template(template));
        }
        while runs.len() > 1 {
            let mut paired = Vec::with_capacity(runs.len().div_ceil(2));
            let mut runs_left = runs.into_iter();
            while let Some(a) = runs_left.next() {
                paired.push(merge(a, runs_left.next().unwrap_or_default()));
            }
            runs = paired;
        }
        strings = merge(strings, runs.pop().unwrap_or_default());
    }
    Some(ClassValue::with_strings(set, strings))
}

fn each(ranges: &[(u32, u32)], mut f: impl FnMut(u32)) {
    for &(lo, hi) in ranges {
        for c in lo..=hi {
            f(c);
        }
    }
}

/// Every sequence a ZWJ template stands for (markers as in `emoji_table`), in order.
fn expand_template(template: &str) -> Vec<Vec<u32>> {
    let mut partial: Vec<Vec<u32>> = vec![Vec::new()];
    for ch in template.chars() {
        let fixed = match ch {
            '_' => ZWJ,
            '!' => VS16,
            '*' | '%' => 0,
            c => c as u32,
        };
        if fixed != 0 {
            for seq in &mut partial {
                seq.push(fixed);
            }
            continue;
        }
        let mut next = Vec::new();
        for seq in &partial {
            // A `%` differs from the tone before it (the last one so far).
            let taken = seq.iter().rev().find(|c| TONES.contains(c));
            for tone in TONES {
                if ch == '%' && taken == Some(&tone) {
                    continue;
                }
                let mut seq = seq.clone();
                seq.push(tone);
                next.push(seq);
            }
        }
        partial = next;
    }
    partial
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(name: &str) -> usize {
        let value = string_property(name).expect("a property of strings");
        let singles: usize = value
            .set
            .ranges()
            .iter()
            .map(|r| r.end() as usize - r.start() as usize + 1)
            .sum();
        singles + value.strings.len()
    }

    #[test]
    fn the_sets_have_the_sizes_of_the_table() {
        // The counts in emoji_table's header (Unicode 17).
        assert_eq!(size("Basic_Emoji"), 1400);
        assert_eq!(size("Emoji_Keycap_Sequence"), 12);
        assert_eq!(size("RGI_Emoji_Modifier_Sequence"), 665);
        assert_eq!(size("RGI_Emoji_Flag_Sequence"), 259);
        assert_eq!(size("RGI_Emoji_Tag_Sequence"), 3);
        assert_eq!(size("RGI_Emoji_ZWJ_Sequence"), 1614);
        assert_eq!(size("RGI_Emoji"), 3953);
        assert!(string_property("Emoji").is_none());
        assert!(string_property("rgi_emoji").is_none());
    }

    #[test]
    fn the_sets_are_sorted_without_duplicates() {
        for name in NAMES {
            let value = string_property(name).expect("a property of strings");
            assert!(value.strings.windows(2).all(|w| w[0] < w[1]), "{name}");
        }
    }

    #[test]
    fn templates_expand_to_every_tone_or_every_other_tone() {
        let out = expand_template("a*_b%");
        assert_eq!(out.len(), 20);
        assert!(out.iter().all(|s| s[1] != s[4] && s[2] == ZWJ));
        assert!(out.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(expand_template("a*_b*").len(), 25);
        let england = [
            0x1F3F4, 0xE0067, 0xE0062, 0xE0065, 0xE006E, 0xE0067, 0xE007F,
        ];
        let tags = string_property("RGI_Emoji_Tag_Sequence").expect("tags");
        assert!(tags.strings.contains(&england.to_vec()));
        assert!(tags.may_contain_strings);
    }
}

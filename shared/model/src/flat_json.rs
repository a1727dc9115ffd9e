//! A fast reader for input lines as producers write them: one flat JSON object whose
//! fields are the record's own, each once, with plain strings and short decimal
//! numbers. It takes only what it reads to exactly the value serde_json gives (no
//! escapes in strings; numbers of at most 15 digits and no exponent, which both
//! turn into the same, correctly rounded, f64) and answers `None` for anything
//! else: an unknown or repeated field, an escape, a nested value, an error. Such a
//! line then goes through serde_json, so records and error messages are serde_json's
//! either way. Counted by callgrind on generated input, parsing and validating a
//! line takes about 1 200–1 450 instructions (about 2 830 through serde_json).

use crate::input::{DeviceEvent, EventType, InputRecord, Order, Payment, Source};
use crate::plain_text::plain_prefix;
use crate::time::Millis;

/// The record a line holds, if it is one this reader takes (see the module's note).
pub fn record(source: Source, line: &str) -> Option<InputRecord> {
    match source {
        Source::Orders => order(line).map(InputRecord::Order),
        Source::Payments => payment(line).map(InputRecord::Payment),
        Source::Devices => device(line).map(InputRecord::Device),
    }
}

const ORDER_FIELDS: [Name; 5] = [
    Name::new("order_id"),
    Name::new("customer_id"),
    Name::new("order_amount"),
    Name::new("order_ts"),
    Name::new("country"),
];
const PAYMENT_FIELDS: [Name; 5] = [
    Name::new("payment_id"),
    Name::new("order_id"),
    Name::new("paid_amount"),
    Name::new("payment_ts"),
    Name::new("method"),
];
const DEVICE_FIELDS: [Name; 5] =
    [Name::new("device_id"), Name::new("site_id"), Name::new("event_type"), Name::new("status"), Name::new("event_ts")];

fn order(line: &str) -> Option<Order> {
    let (order_id, customer_id, order_amount, order_ts, country) = ids_amount_time_code(line, &ORDER_FIELDS)?;
    Some(Order {
        order_id: order_id.into(),
        customer_id: customer_id.into(),
        order_amount,
        order_ts,
        country: country.into(),
    })
}

fn payment(line: &str) -> Option<Payment> {
    let (payment_id, order_id, paid_amount, payment_ts, method) = ids_amount_time_code(line, &PAYMENT_FIELDS)?;
    Some(Payment {
        payment_id: payment_id.into(),
        order_id: order_id.into(),
        paid_amount,
        payment_ts,
        method: method.into(),
    })
}

/// An order's or a payment's fields, named by `names` in this order: two ids, an
/// amount, an event time and a code. Inlined into both, as they were written before
/// they shared it (callgrind: 3.5 % fewer instructions in their readers than a call).
#[inline(always)]
fn ids_amount_time_code<'a>(line: &'a str, names: &[Name; 5]) -> Option<(&'a str, &'a str, f64, Millis, &'a str)> {
    let (mut first_id, mut second_id, mut amount, mut time, mut code) = (None, None, None, None, None);
    for_each_field(line, names, |field, value| match field {
        0 => once(&mut first_id, value.text()?),
        1 => once(&mut second_id, value.text()?),
        2 => once(&mut amount, value.float()?),
        3 => once(&mut time, value.int()?),
        4 => once(&mut code, value.text()?),
        _ => None,
    })?;
    Some((first_id?, second_id?, amount?, time?, code?))
}

fn device(line: &str) -> Option<DeviceEvent> {
    let (mut device_id, mut site_id, mut event_type, mut status, mut event_ts) = (None, None, None, None, None);
    for_each_field(line, &DEVICE_FIELDS, |field, value| match field {
        0 => once(&mut device_id, value.text()?),
        1 => once(&mut site_id, value.text()?),
        2 => once(&mut event_type, event_type_named(value.text()?)?),
        3 => once(&mut status, value.text()?),
        4 => once(&mut event_ts, value.int()?),
        _ => None,
    })?;
    Some(DeviceEvent {
        device_id: device_id?.into(),
        site_id: site_id?.into(),
        event_type: event_type?,
        status: status?.into(),
        event_ts: event_ts?,
    })
}

fn event_type_named(name: &str) -> Option<EventType> {
    Some(match name {
        "heartbeat" => EventType::Heartbeat,
        "fault" => EventType::Fault,
        "reboot" => EventType::Reboot,
        "firmware_update" => EventType::FirmwareUpdate,
        _ => return None,
    })
}

/// Fills a field seen for the first time; a second one is serde_json's error to give.
fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
    match slot {
        Some(_) => None,
        None => {
            *slot = Some(value);
            Some(())
        }
    }
}

/// The bytes that end a string's plain run: its closing quote, an escape, a control
/// character (which JSON does not allow unescaped).
static ENDS_PLAIN_TEXT: [bool; 256] = {
    let mut ends = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        ends[b] = true;
        b += 1;
    }
    ends[b'"' as usize] = true;
    ends[b'\\' as usize] = true;
    ends
};

/// A field's value as it stands in the line.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value<'a> {
    /// A string's content, which holds no escape.
    Text(&'a str),
    /// A number: its sign, its digits read as one integer (the point left out), and
    /// how many of them follow the point.
    Number { negative: bool, significand: u64, decimals: usize },
}

/// Powers of ten exact in an f64.
const POW10: [f64; 16] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];
/// The most digits a number may have here: below 2^53, so exact as an f64.
const MAX_DIGITS: usize = 15;

impl<'a> Value<'a> {
    fn text(self) -> Option<&'a str> {
        match self {
            Value::Text(s) => Some(s),
            Value::Number { .. } => None,
        }
    }

    /// The digits as an exact integer over an exact power of ten: one division,
    /// correctly rounded, as serde_json and `str::parse` also give it.
    fn float(self) -> Option<f64> {
        let Value::Number { negative, significand, decimals } = self else { return None };
        let value = significand as f64 / POW10[decimals];
        Some(if negative { -value } else { value })
    }

    /// A whole number; serde_json refuses `-0` and anything with a point for an i64
    /// (it reads them as floats), so they are left to it.
    fn int(self) -> Option<Millis> {
        let Value::Number { negative, significand, decimals: 0 } = self else { return None };
        // At most 15 digits: well inside an i64.
        let n = significand as Millis;
        match (negative, n) {
            (true, 0) => None,
            (true, n) => Some(-n),
            (false, n) => Some(n),
        }
    }
}

/// Calls `field` with each field of a flat JSON object that makes up the whole line
/// (its index in `names`, and its value); `None` if the line is not one, a field is
/// not in `names`, or `field` declines one. Each field is first taken to be the one
/// that follows the last in `names`' order: producers write their fields in one
/// order, and checking the expected name costs one comparison instead of reading the
/// name and looking it up.
fn for_each_field<'a>(
    line: &'a str,
    names: &[Name],
    mut field: impl FnMut(usize, Value<'a>) -> Option<()>,
) -> Option<()> {
    let mut r = Reader { line, at: 0 };
    r.expect(b'{')?;
    if r.peek()? == b'}' {
        r.at += 1;
    } else {
        let mut expected = 0;
        loop {
            let index = match names.get(expected) {
                Some(name) if r.take_name(name) => expected,
                _ => {
                    let name = r.string()?;
                    let index = names.iter().position(|n| n.text == name)?;
                    r.expect(b':')?;
                    index
                }
            };
            expected = index + 1;
            field(index, r.value()?)?;
            match r.next()? {
                b',' => continue,
                b'}' => break,
                _ => return None,
            }
        }
    }
    r.skip_space();
    (r.at == line.len()).then_some(())
}

/// A field's name as it mostly stands in a line: in quotes and followed by its colon,
/// with the first and the last eight bytes of that as words: whether it comes next
/// takes two comparisons instead of a call to `memcmp` (callgrind: 26 instructions a
/// name before), and the colon comes with it (white space before the colon takes the
/// general path).
#[derive(Debug, Clone, Copy)]
struct Name {
    text: &'static str,
    head: u64,
    tail: u64,
}

impl Name {
    /// In quotes and with its colon, the name must take 8 to 16 bytes, which its two
    /// words cover.
    const fn new(text: &'static str) -> Name {
        let quoted_len = text.len() + 3;
        assert!(quoted_len >= 8 && quoted_len <= 16, "a field name of 5 to 13 bytes");
        Name { text, head: quoted_word(text, 0), tail: quoted_word(text, quoted_len - 8) }
    }

    fn quoted_len(&self) -> usize {
        self.text.len() + 3
    }

    /// Whether `bytes` begin with the name in quotes and its colon.
    fn begins(&self, bytes: &[u8]) -> bool {
        let Some(quoted) = bytes.get(..self.quoted_len()) else { return false };
        match (quoted.first_chunk(), quoted.last_chunk()) {
            (Some(head), Some(tail)) => {
                u64::from_le_bytes(*head) == self.head && u64::from_le_bytes(*tail) == self.tail
            }
            _ => false,
        }
    }
}

/// Eight bytes of `"text":` (the name in quotes, and its colon) from `from` on, the
/// first lowest.
const fn quoted_word(text: &str, from: usize) -> u64 {
    let bytes = text.as_bytes();
    let mut word = 0;
    let mut i = 0;
    while i < 8 {
        let at = from + i;
        let b = if at == 0 || at == bytes.len() + 1 {
            b'"'
        } else if at == bytes.len() + 2 {
            b':'
        } else {
            bytes[at - 1]
        };
        word |= (b as u64) << (8 * i);
        i += 1;
    }
    word
}

struct Reader<'a> {
    line: &'a str,
    at: usize,
}

impl<'a> Reader<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.line.as_bytes()
    }

    fn skip_space(&mut self) {
        while matches!(self.bytes().get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    /// The next byte that is not white space, without taking it. Inlined: mostly it
    /// is the next byte, and one look settles that.
    #[inline(always)]
    fn peek(&mut self) -> Option<u8> {
        match *self.bytes().get(self.at)? {
            b' ' | b'\t' | b'\n' | b'\r' => {
                self.skip_space();
                self.bytes().get(self.at).copied()
            }
            b => Some(b),
        }
    }

    fn next(&mut self) -> Option<u8> {
        let b = self.peek()?;
        self.at += 1;
        Some(b)
    }

    fn expect(&mut self, want: u8) -> Option<()> {
        (self.next()? == want).then_some(())
    }

    /// Takes the string `name` and its colon if they come next (after white space).
    fn take_name(&mut self, name: &Name) -> bool {
        self.peek(); // past any white space: a single look when there is none
        let found = name.begins(&self.bytes()[self.at..]);
        if found {
            self.at += name.quoted_len();
        }
        found
    }

    /// A string with no escape and no control character.
    fn string(&mut self) -> Option<&'a str> {
        self.expect(b'"')?;
        self.string_rest()
    }

    /// The rest of a string whose opening quote was just taken.
    fn string_rest(&mut self) -> Option<&'a str> {
        let bytes = self.bytes();
        let start = self.at;
        let mut end = start;
        // Eight bytes at a time up to the first that is not printable ASCII (the
        // closing quote, mostly); from there, and near the line's end, one by one.
        while let Some(word) = bytes.get(end..end + 8) {
            let plain = plain_prefix(u64::from_le_bytes(word.try_into().ok()?));
            end += plain;
            if plain < 8 {
                break;
            }
        }
        if *bytes.get(end)? != b'"' {
            while !ENDS_PLAIN_TEXT[usize::from(*bytes.get(end)?)] {
                end += 1;
            }
            if bytes[end] != b'"' {
                return None;
            }
        }
        self.at = end + 1;
        // Both ends are ASCII quotes, so the slice is whole characters.
        Some(&self.line[start..end])
    }

    // Once per field: inlined, its answer stays in registers (callgrind: the reader
    // threads 2 % fewer instructions).
    #[inline(always)]
    fn value(&mut self) -> Option<Value<'a>> {
        if self.peek()? == b'"' {
            self.at += 1;
            return self.string_rest().map(Value::Text);
        }
        self.number()
    }

    /// JSON's `-?(0|[1-9][0-9]*)(.[0-9]+)?`, with no exponent and at most
    /// [`MAX_DIGITS`] digits.
    fn number(&mut self) -> Option<Value<'a>> {
        let bytes = self.bytes();
        let negative = bytes.get(self.at) == Some(&b'-');
        let start = self.at + usize::from(negative);
        let (mut significand, mut digits, mut point) = (0u64, 0, None);
        let mut at = start;
        // Eight leading digits at once where there are (epoch-millisecond times have 13).
        if let Some(word) = bytes.get(at..at + 8).and_then(eight_digits) {
            (significand, digits) = (word, 8);
            at += 8;
        }
        while let Some(&b) = bytes.get(at) {
            match b {
                b'0'..=b'9' => {
                    significand = significand * 10 + u64::from(b - b'0');
                    digits += 1;
                    if digits > MAX_DIGITS {
                        return None;
                    }
                }
                b'.' if point.is_none() && digits > 0 => point = Some(digits),
                _ => break,
            }
            at += 1;
        }
        let whole = point.unwrap_or(digits);
        let decimals = digits - whole;
        let leading_zero = whole > 1 && bytes[start] == b'0';
        if whole == 0 || leading_zero || point.is_some() && decimals == 0 || matches!(bytes.get(at), Some(b'e' | b'E'))
        {
            return None;
        }
        self.at = at;
        Some(Value::Number { negative, significand, decimals })
    }
}

/// Eight ASCII digits as their number; `None` if any of them is not a digit.
fn eight_digits(bytes: &[u8]) -> Option<u64> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let word = u64::from_le_bytes(bytes.try_into().ok()?);
    // Every byte 0x30..=0x3f, and still below 0x40 with 6 added: 0x30..=0x39.
    let high_nibbles = 0xf0 * ONES;
    if word & high_nibbles != 0x30 * ONES || (word + 0x06 * ONES) & high_nibbles != 0x30 * ONES {
        return None;
    }
    // Digit pairs, then groups of four, then all eight, by multiplications that add
    // each digit in at its place (the first digit is the lowest byte).
    let digits = word - 0x30 * ONES;
    let pairs = digits.wrapping_mul(10).wrapping_add(digits >> 8);
    const LOW: u64 = 0x0000_00ff_0000_00ff;
    let eight = (pairs & LOW)
        .wrapping_mul(100 + (1_000_000 << 32))
        .wrapping_add(((pairs >> 16) & LOW).wrapping_mul(1 + (10_000 << 32)));
    Some(eight >> 32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::InputRecord;

    const LINES: [(Source, &str); 4] = [
        (
            Source::Orders,
            r#"{"order_id":"order-0000","customer_id":"cust-003","order_amount":143.22,"order_ts":1700000000000,"country":"CA"}"#,
        ),
        (
            Source::Payments,
            r#"{ "payment_id" : "pay-0000", "order_id": "order-0000", "paid_amount": 0.1, "payment_ts": 1700000000866, "method": "card" } "#,
        ),
        (
            Source::Devices,
            r#"{"status":"failed","event_ts":1700000000207,"device_id":"dev-100","site_id":"site-a","event_type":"firmware_update"}"#,
        ),
        (
            // Strings longer than a word, with characters beyond ASCII (and DEL) in them.
            Source::Devices,
            "{\"device_id\":\"dev-Zürich-ørsted-0001\",\"site_id\":\"site-long-name-\u{7f}-b\",\"event_type\":\"fault\",\"status\":\"ok ✓ twelve bytes€\",\"event_ts\":1700000000207}",
        ),
    ];

    fn by_serde(source: Source, line: &str) -> Option<InputRecord> {
        Some(match source {
            Source::Orders => InputRecord::Order(serde_json::from_str(line).ok()?),
            Source::Payments => InputRecord::Payment(serde_json::from_str(line).ok()?),
            Source::Devices => InputRecord::Device(serde_json::from_str(line).ok()?),
        })
    }

    /// Equal, and amounts equal to the bit (so -0.0 is not 0.0).
    fn same(a: &InputRecord, b: &InputRecord) -> bool {
        let amount = |r: &InputRecord| match r {
            InputRecord::Order(o) => o.order_amount.to_bits(),
            InputRecord::Payment(p) => p.paid_amount.to_bits(),
            InputRecord::Device(_) => 0,
        };
        a == b && amount(a) == amount(b)
    }

    #[test]
    fn reads_eight_digits_at_once() {
        for n in [0u64, 1, 7, 10_000_000, 12_345_678, 99_999_999, 17_000_000, 90_000_009] {
            assert_eq!(eight_digits(format!("{n:08}").as_bytes()), Some(n), "{n}");
        }
        for bad in ["1234567 ", "/1234567", "1234567:", "12.45678", "-1234567", "1234\u{e9}67"] {
            assert_eq!(eight_digits(&bad.as_bytes()[..8]), None, "{bad}");
        }
    }

    /// Amounts and times of every length up to the limit, the point anywhere.
    #[test]
    fn numbers_of_every_length_read_as_serde_json_reads_them() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let digits = format!("{seed}");
            let len = 1 + (seed % 15) as usize;
            let whole = 1 + (seed >> 8) as usize % len;
            let amount = match &digits[whole..len] {
                "" => digits[..whole].to_string(),
                fraction => format!("{}.{fraction}", &digits[..whole]),
            };
            let line = format!(
                r#"{{"payment_id":"p","order_id":"o","paid_amount":{amount},"payment_ts":{},"method":"card"}}"#,
                &digits[..len]
            );
            let fast = record(Source::Payments, &line).unwrap_or_else(|| panic!("not taken: {line}"));
            assert!(same(&fast, &by_serde(Source::Payments, &line).unwrap()), "{line}");
            let at_the_end = format!(
                r#"{{"device_id":"d","site_id":"s","event_type":"fault","status":"x","event_ts":{}}}"#,
                &digits[..len]
            );
            let fast = record(Source::Devices, &at_the_end).unwrap_or_else(|| panic!("not taken: {at_the_end}"));
            assert!(same(&fast, &by_serde(Source::Devices, &at_the_end).unwrap()), "{at_the_end}");
        }
    }

    #[test]
    fn a_name_begins_only_the_bytes_that_hold_it_in_quotes_and_its_colon() {
        for name in ORDER_FIELDS.iter().chain(&PAYMENT_FIELDS).chain(&DEVICE_FIELDS) {
            let quoted = format!("\"{}\":", name.text);
            assert!(name.begins(format!("{quoted} 1").as_bytes()), "{quoted}");
            assert!(name.begins(quoted.as_bytes()), "{quoted}");
            assert!(!name.begins(&quoted.as_bytes()[..quoted.len() - 1]), "{quoted} cut short");
            // Any one byte changed, wherever it is.
            for at in 0..quoted.len() {
                let mut changed = quoted.clone().into_bytes();
                changed[at] ^= 0x20;
                assert!(!name.begins(&changed), "{quoted} with byte {at} changed");
            }
        }
    }

    #[test]
    fn reads_the_streams_lines_as_serde_json_does() {
        for (source, line) in LINES {
            let fast = record(source, line).unwrap_or_else(|| panic!("not taken: {line}"));
            assert!(same(&fast, &by_serde(source, line).unwrap()), "{line}");
        }
    }

    #[test]
    fn leaves_to_serde_json_what_it_does_not_read_exactly() {
        let payment = |amount: &str, ts: &str| {
            format!(r#"{{"payment_id":"p","order_id":"o","paid_amount":{amount},"payment_ts":{ts},"method":"card"}}"#)
        };
        for line in [
            payment("1e2", "1"),
            payment("1.5E0", "1"),
            payment("1234567890.1234567", "1"),
            payment("01.5", "1"),
            payment("1.", "1"),
            payment("1", "-0"),
            payment("1", "1.0"),
            payment("\"1\"", "1"),
            payment("1", "1234567890123456"),
            r#"{"payment_id":"p\u0041","order_id":"o","paid_amount":1,"payment_ts":1,"method":"card"}"#.into(),
            r#"{"payment_id":"p","order_id":"o","paid_amount":1,"payment_ts":1,"method":"card","extra":{}}"#.into(),
            r#"{"payment_idx":"p","order_id":"o","paid_amount":1,"payment_ts":1,"method":"card"}"#.into(),
            r#"{"payment_id":"p","payment_id":"q","order_id":"o","paid_amount":1,"payment_ts":1,"method":"card"}"#
                .into(),
            r#"{"payment_id":"p","order_id":"o","paid_amount":1,"payment_ts":1}"#.into(),
            r#"{"payment_id":"p","order_id":"o","paid_amount":1,"payment_ts":1,"method":"card"} x"#.into(),
        ] {
            assert_eq!(record(Source::Payments, &line), None, "{line}");
        }
        let negative_zero = record(Source::Payments, &payment("-0.0", "7")).unwrap();
        assert!(same(&negative_zero, &by_serde(Source::Payments, &payment("-0.0", "7")).unwrap()));
    }

    /// Lines edited at random, byte by byte: whatever the fast reader takes, serde_json
    /// reads to the same record.
    #[test]
    fn every_line_it_takes_serde_json_reads_the_same() {
        const EDITS: &[u8] = b"{}[]:,\" -.eE0123456789 \tnull\\\x01\x7f";
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut random = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut taken, mut tried) = (0, 0);
        for _ in 0..20_000 {
            let (source, line) = LINES[random(LINES.len())];
            let mut bytes = line.as_bytes().to_vec();
            for _ in 0..1 + random(3) {
                let at = random(bytes.len());
                let edit = EDITS[random(EDITS.len())];
                match random(3) {
                    0 => bytes[at] = edit,
                    1 => bytes.insert(at, edit),
                    _ => {
                        bytes.remove(at);
                    }
                }
            }
            let Ok(line) = std::str::from_utf8(&bytes) else { continue };
            tried += 1;
            if let Some(fast) = record(source, line) {
                taken += 1;
                let slow =
                    by_serde(source, line).unwrap_or_else(|| panic!("serde_json refuses what was taken: {line}"));
                assert!(same(&fast, &slow), "{line}: {fast:?} against {slow:?}");
            }
        }
        // Enough edits keep a valid record (a digit for a digit, a space) to mean something.
        assert!(taken > tried / 20, "{taken} of {tried} taken");
    }
}

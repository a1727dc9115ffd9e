//! JSON as Python's `json.dumps` writes it by default, which is how the seed's job
//! prints its lines: `", "` and `": "` between items; strings in printable ASCII,
//! every other character escaped (`ensure_ascii`); floats as `repr` writes them
//! (`1e-05`, `1e+16`, `90.0`), non-finite ones as `NaN` and `Infinity`.
//!
//! [`Writer`] is a serde serializer for the flat records Vigil emits (structs of
//! numbers, strings, booleans and options); it writes straight into a byte buffer.

use serde::ser::{self, Impossible, Serialize};
use serde_json::ser::{CompactFormatter, Formatter};

use crate::plain_text::{is_plain, PLAIN};

/// Appends `bytes`, inlined where it is called: a field name's or a separator's
/// length is then known and the copy is a move or two, not the call and `memcpy`
/// that `extend_from_slice` becomes when LLVM leaves it out of line (the
/// measurement: docs/decisions.md, "The generic runtime at the old pipeline's speed").
#[inline(always)]
fn put(out: &mut Vec<u8>, bytes: &[u8]) {
    out.reserve(bytes.len());
    let len = out.len();
    // SAFETY: `reserve` made room for `bytes.len()` more bytes after `len`; they are
    // written before the length covers them, and `bytes` cannot overlap `out`'s
    // spare capacity (it is borrowed while `out` is borrowed mutably).
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().add(len), bytes.len());
        out.set_len(len + bytes.len());
    }
}

/// A string as a JSON string literal, quotes included.
#[inline]
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    // Ids, codes and times have nothing to escape: one check, one copy.
    if is_plain(bytes) {
        out.reserve(bytes.len() + 2);
        out.push(b'"');
        put(out, bytes);
        out.push(b'"');
        return;
    }
    out.push(b'"');
    let (mut i, mut plain) = (0, 0);
    while i < bytes.len() {
        let b = bytes[i];
        if PLAIN[usize::from(b)] {
            i += 1;
            continue;
        }
        out.extend_from_slice(&bytes[plain..i]);
        if b.is_ascii() {
            match b {
                b'"' | b'\\' => out.extend_from_slice(&[b'\\', b]),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0x08 => out.extend_from_slice(b"\\b"),
                0x0c => out.extend_from_slice(b"\\f"),
                _ => escape_unit(out, u16::from(b)),
            }
            i += 1;
        } else {
            let c = s[i..].chars().next().expect("a character starts at a non-ASCII byte reached here");
            for &unit in c.encode_utf16(&mut [0; 2]).iter() {
                escape_unit(out, unit);
            }
            i += c.len_utf8();
        }
        plain = i;
    }
    out.extend_from_slice(&bytes[plain..]);
    out.push(b'"');
}

fn escape_unit(out: &mut Vec<u8>, unit: u16) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digit = |shift: u16| HEX[usize::from((unit >> shift) & 0xf)];
    out.extend_from_slice(&[b'\\', b'u', digit(12), digit(8), digit(4), digit(0)]);
}

/// A float as Python's `repr`: the shortest digits that read back the same, in
/// positional notation for exponents from -4 to 15 and in scientific notation
/// (with a sign and at least two exponent digits) otherwise.
pub fn write_f64(out: &mut Vec<u8>, f: f64) {
    if !f.is_finite() {
        out.extend_from_slice(match (f.is_nan(), f > 0.0) {
            (true, _) => b"NaN",
            (false, true) => b"Infinity",
            (false, false) => b"-Infinity",
        });
        return;
    }
    if f == 0.0 || (1e-4..1e15).contains(&f.abs()) {
        // serde_json's shortest digits, in the positional notation `repr` uses here.
        CompactFormatter.write_f64(out, f).expect("writing to a Vec");
        return;
    }
    let mut shortest = Vec::with_capacity(24);
    CompactFormatter.write_f64(&mut shortest, f).expect("writing to a Vec");
    let text = std::str::from_utf8(&shortest).expect("ASCII");
    let (negative, text) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if negative {
        out.push(b'-');
    }
    let (digits, point) = digits_and_point(text);
    if digits.is_empty() {
        out.extend_from_slice(b"0.0");
    } else if (-3..=16).contains(&point) {
        positional(out, &digits, point);
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        let exponent = point - 1;
        out.push(b'e');
        out.push(if exponent < 0 { b'-' } else { b'+' });
        if exponent.abs() < 10 {
            out.push(b'0');
        }
        out.extend_from_slice(exponent.abs().to_string().as_bytes());
    }
}

/// The significant digits of a non-negative number written in either notation, and
/// where the decimal point goes among them (the value is `0.DIGITS × 10^point`).
/// Zero has no digits.
fn digits_and_point(text: &str) -> (Vec<u8>, i32) {
    let (mantissa, exponent) = match text.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().expect("a decimal exponent")),
        None => (text, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all: Vec<u8> = int.bytes().chain(frac.bytes()).collect();
    let leading = all.iter().take_while(|&&d| d == b'0').count();
    let mut digits = all[leading..].to_vec();
    while digits.last() == Some(&b'0') {
        digits.pop();
    }
    (digits, int.len() as i32 - leading as i32 + exponent)
}

fn positional(out: &mut Vec<u8>, digits: &[u8], point: i32) {
    if point <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', point.unsigned_abs() as usize));
        out.extend_from_slice(digits);
        return;
    }
    let point = point as usize;
    if point >= digits.len() {
        out.extend_from_slice(digits);
        out.extend(std::iter::repeat_n(b'0', point - digits.len()));
        out.extend_from_slice(b".0");
    } else {
        out.extend_from_slice(&digits[..point]);
        out.push(b'.');
        out.extend_from_slice(&digits[point..]);
    }
}

/// What [`Writer`] cannot write: anything but flat records.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Unsupported(String);

impl ser::Error for Unsupported {
    fn custom<T: std::fmt::Display>(msg: T) -> Self {
        Unsupported(msg.to_string())
    }
}

/// A serde serializer writing `json.dumps`' form of a flat record into `out`.
pub struct Writer<'a> {
    pub out: &'a mut Vec<u8>,
}

/// A struct being written: whether a field has been written yet.
pub struct Fields<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

fn unsupported<T>(what: &str) -> Result<T, Unsupported> {
    Err(Unsupported(format!("{what} is not written by the output records' JSON writer")))
}

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = Unsupported;
    type SerializeSeq = Impossible<(), Unsupported>;
    type SerializeTuple = Impossible<(), Unsupported>;
    type SerializeTupleStruct = Impossible<(), Unsupported>;
    type SerializeTupleVariant = Impossible<(), Unsupported>;
    type SerializeMap = Impossible<(), Unsupported>;
    type SerializeStruct = Fields<'a>;
    type SerializeStructVariant = Impossible<(), Unsupported>;

    #[inline]
    fn serialize_bool(self, v: bool) -> Result<(), Unsupported> {
        put(self.out, if v { b"true" } else { b"false" });
        Ok(())
    }
    fn serialize_i8(self, v: i8) -> Result<(), Unsupported> {
        self.serialize_i64(v.into())
    }
    fn serialize_i16(self, v: i16) -> Result<(), Unsupported> {
        self.serialize_i64(v.into())
    }
    fn serialize_i32(self, v: i32) -> Result<(), Unsupported> {
        self.serialize_i64(v.into())
    }
    #[inline]
    fn serialize_i64(self, v: i64) -> Result<(), Unsupported> {
        put(self.out, itoa::Buffer::new().format(v).as_bytes());
        Ok(())
    }
    fn serialize_u8(self, v: u8) -> Result<(), Unsupported> {
        self.serialize_u64(v.into())
    }
    fn serialize_u16(self, v: u16) -> Result<(), Unsupported> {
        self.serialize_u64(v.into())
    }
    fn serialize_u32(self, v: u32) -> Result<(), Unsupported> {
        self.serialize_u64(v.into())
    }
    #[inline]
    fn serialize_u64(self, v: u64) -> Result<(), Unsupported> {
        put(self.out, itoa::Buffer::new().format(v).as_bytes());
        Ok(())
    }
    fn serialize_f32(self, v: f32) -> Result<(), Unsupported> {
        self.serialize_f64(v.into())
    }
    fn serialize_f64(self, v: f64) -> Result<(), Unsupported> {
        write_f64(self.out, v);
        Ok(())
    }
    fn serialize_char(self, v: char) -> Result<(), Unsupported> {
        self.serialize_str(v.encode_utf8(&mut [0; 4]))
    }
    fn serialize_str(self, v: &str) -> Result<(), Unsupported> {
        write_str(self.out, v);
        Ok(())
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<(), Unsupported> {
        unsupported("bytes")
    }
    fn serialize_none(self) -> Result<(), Unsupported> {
        self.serialize_unit()
    }
    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Unsupported> {
        value.serialize(self)
    }
    fn serialize_unit(self) -> Result<(), Unsupported> {
        self.out.extend_from_slice(b"null");
        Ok(())
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Unsupported> {
        self.serialize_unit()
    }
    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Unsupported> {
        self.serialize_str(variant)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, value: &T) -> Result<(), Unsupported> {
        value.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Unsupported> {
        unsupported("an enum variant with data")
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Unsupported> {
        unsupported("a sequence")
    }
    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Unsupported> {
        unsupported("a tuple")
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, Unsupported> {
        unsupported("a tuple struct")
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Unsupported> {
        unsupported("a tuple variant")
    }
    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Unsupported> {
        unsupported("a map")
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<Fields<'a>, Unsupported> {
        self.out.push(b'{');
        Ok(Fields { out: self.out, first: true })
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Unsupported> {
        unsupported("a struct variant")
    }
}

impl ser::SerializeStruct for Fields<'_> {
    type Ok = ();
    type Error = Unsupported;

    #[inline(always)]
    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), Unsupported> {
        // Field names are the seed's: plain ASCII, written as they are.
        debug_assert!(key.bytes().all(|b| PLAIN[usize::from(b)]), "{key}");
        if std::mem::take(&mut self.first) {
            self.out.push(b'"');
        } else {
            put(self.out, b", \"");
        }
        put(self.out, key.as_bytes());
        put(self.out, b"\": ");
        value.serialize(Writer { out: self.out })
    }

    fn end(self) -> Result<(), Unsupported> {
        self.out.push(b'}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn string(s: &str) -> String {
        let mut out = Vec::new();
        write_str(&mut out, s);
        String::from_utf8(out).unwrap()
    }

    fn float(f: f64) -> String {
        let mut out = Vec::new();
        write_f64(&mut out, f);
        String::from_utf8(out).unwrap()
    }

    /// What Python 3's `json.dumps` writes for the same strings.
    #[test]
    fn strings_are_escaped_as_json_dumps_escapes_them() {
        assert_eq!(string("cust-001"), r#""cust-001""#);
        assert_eq!(string(""), r#""""#);
        assert_eq!(string("Ça"), r#""\u00c7a""#);
        assert_eq!(string("dev-\u{e9}\u{7f}\u{1f600}\"\\\n\u{1}~"), r#""dev-\u00e9\u007f\ud83d\ude00\"\\\n\u0001~""#);
        assert_eq!(string("\r\t\u{8}\u{c}\u{1f}"), r#""\r\t\b\f\u001f""#);
        assert_eq!(string("é"), r#""\u00e9""#);
        assert_eq!(string("aé€b"), r#""a\u00e9\u20acb""#);
    }

    /// What Python 3's `repr` writes for the same floats.
    #[test]
    fn floats_are_written_as_python_repr_writes_them() {
        let cases = [
            (90.0, "90.0"),
            (965.6, "965.6"),
            (0.8, "0.8"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456789012345680.0, "1.2345678901234568e+17"),
            (1e-5, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (0.00012, "0.00012"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (12345678.9, "12345678.9"),
            (9999999999999998.0, "9999999999999998.0"),
            (999999999999999.9, "999999999999999.9"),
            (0.00009999, "9.999e-05"),
            (-2.5e-9, "-2.5e-09"),
            (f64::NAN, "NaN"),
            (f64::INFINITY, "Infinity"),
            (f64::NEG_INFINITY, "-Infinity"),
        ];
        for (f, python) in cases {
            assert_eq!(float(f), python, "{f:e}");
        }
    }
}

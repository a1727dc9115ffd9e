//! Encoding: a serde value's fields written as Avro binary, each in the place and
//! form its shape gives.

use serde::ser::{self, Impossible, Serialize, SerializeStruct};

use super::refused::{refuse, Refused};
use super::shape::{Field, Shape};

/// Appends `value`'s datum to `out`. When refused, `out` may hold part of it.
pub fn write<T: Serialize + ?Sized>(shape: &Shape, value: &T, out: &mut Vec<u8>) -> Result<(), Refused> {
    value.serialize(Writer { shape, out })
}

/// A long as Avro writes it: zig-zag, then seven bits a byte, low bits first.
fn write_long(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    while z >= 0x80 {
        out.push(z as u8 | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

fn write_length_prefixed(out: &mut Vec<u8>, bytes: &[u8]) {
    write_long(out, bytes.len() as i64);
    out.extend_from_slice(bytes);
}

fn symbol_index(symbols: &[String], symbol: &str) -> Option<i64> {
    symbols.iter().position(|s| s == symbol).map(|i| i as i64)
}

struct Writer<'a> {
    shape: &'a Shape,
    out: &'a mut Vec<u8>,
}

impl<'a> Writer<'a> {
    /// The shape a present value takes: in a nullable, the other branch, whose index
    /// is written first.
    fn present(self) -> (&'a Shape, &'a mut Vec<u8>) {
        match self.shape {
            Shape::Nullable { present, null_index } => {
                write_long(self.out, i64::from(1 - null_index));
                (present, self.out)
            }
            shape => (shape, self.out),
        }
    }

    fn integer(self, v: i64) -> Result<(), Refused> {
        match self.present() {
            (Shape::Long, out) => write_long(out, v),
            (Shape::Int, out) => match i32::try_from(v) {
                Ok(v) => write_long(out, i64::from(v)),
                Err(_) => return refuse(&Shape::Int, "an integer beyond 32 bits"),
            },
            (shape, _) => return refuse(shape, "an integer"),
        }
        Ok(())
    }

    fn text(self, v: &str) -> Result<(), Refused> {
        match self.present() {
            (Shape::String, out) => write_length_prefixed(out, v.as_bytes()),
            (Shape::Enum(symbols), out) => match symbol_index(symbols, v) {
                Some(i) => write_long(out, i),
                None => return Err(Refused(format!("`{v}` is not a symbol of {symbols:?}"))),
            },
            (shape, _) => return refuse(shape, "a string"),
        }
        Ok(())
    }
}

impl<'a> ser::Serializer for Writer<'a> {
    type Ok = ();
    type Error = Refused;
    type SerializeSeq = Impossible<(), Refused>;
    type SerializeTuple = Impossible<(), Refused>;
    type SerializeTupleStruct = Impossible<(), Refused>;
    type SerializeTupleVariant = Impossible<(), Refused>;
    type SerializeMap = Impossible<(), Refused>;
    type SerializeStruct = RecordWriter<'a>;
    type SerializeStructVariant = Impossible<(), Refused>;

    fn serialize_bool(self, v: bool) -> Result<(), Refused> {
        match self.present() {
            (Shape::Boolean, out) => out.push(u8::from(v)),
            (shape, _) => return refuse(shape, "a boolean"),
        }
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_i16(self, v: i16) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_i32(self, v: i32) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_i64(self, v: i64) -> Result<(), Refused> {
        self.integer(v)
    }

    fn serialize_u8(self, v: u8) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_u16(self, v: u16) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_u32(self, v: u32) -> Result<(), Refused> {
        self.integer(v.into())
    }

    fn serialize_u64(self, v: u64) -> Result<(), Refused> {
        match i64::try_from(v) {
            Ok(v) => self.integer(v),
            Err(_) => refuse(self.shape, "an integer beyond 63 bits"),
        }
    }

    fn serialize_f32(self, v: f32) -> Result<(), Refused> {
        match self.present() {
            (Shape::Float, out) => out.extend_from_slice(&v.to_le_bytes()),
            (shape, _) => return refuse(shape, "a float"),
        }
        Ok(())
    }

    fn serialize_f64(self, v: f64) -> Result<(), Refused> {
        match self.present() {
            (Shape::Double, out) => out.extend_from_slice(&v.to_le_bytes()),
            (shape, _) => return refuse(shape, "a double"),
        }
        Ok(())
    }

    fn serialize_char(self, _: char) -> Result<(), Refused> {
        refuse(self.shape, "a char")
    }

    fn serialize_str(self, v: &str) -> Result<(), Refused> {
        self.text(v)
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), Refused> {
        match self.present() {
            (Shape::Bytes, out) => write_length_prefixed(out, v),
            (shape, _) => return refuse(shape, "bytes"),
        }
        Ok(())
    }

    fn serialize_none(self) -> Result<(), Refused> {
        match self.shape {
            Shape::Nullable { null_index, .. } => write_long(self.out, i64::from(*null_index)),
            Shape::Null => {}
            shape => return refuse(shape, "no value"),
        }
        Ok(())
    }

    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<(), Refused> {
        value.serialize(self)
    }

    fn serialize_unit(self) -> Result<(), Refused> {
        self.serialize_none()
    }

    fn serialize_unit_struct(self, _: &'static str) -> Result<(), Refused> {
        self.serialize_none()
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<(), Refused> {
        self.text(variant)
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, _: &'static str, value: &T) -> Result<(), Refused> {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Refused> {
        refuse(self.shape, "an enum variant with a value")
    }

    fn serialize_seq(self, _: Option<usize>) -> Result<Self::SerializeSeq, Refused> {
        refuse(self.shape, "a sequence")
    }

    fn serialize_tuple(self, _: usize) -> Result<Self::SerializeTuple, Refused> {
        refuse(self.shape, "a tuple")
    }

    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<Self::SerializeTupleStruct, Refused> {
        refuse(self.shape, "a tuple struct")
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeTupleVariant, Refused> {
        refuse(self.shape, "a tuple variant")
    }

    fn serialize_map(self, _: Option<usize>) -> Result<Self::SerializeMap, Refused> {
        refuse(self.shape, "a map")
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<RecordWriter<'a>, Refused> {
        match self.present() {
            (Shape::Record(fields), out) => Ok(RecordWriter { fields, next: 0, out }),
            (shape, _) => refuse(shape, "a struct"),
        }
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<Self::SerializeStructVariant, Refused> {
        refuse(self.shape, "a struct variant")
    }
}

/// Writes a struct's fields, which must come in the schema's order, every one of them
/// (a skipped field would need its default, which the generic way writes).
struct RecordWriter<'a> {
    fields: &'a [Field],
    next: usize,
    out: &'a mut Vec<u8>,
}

impl SerializeStruct for RecordWriter<'_> {
    type Ok = ();
    type Error = Refused;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, name: &'static str, value: &T) -> Result<(), Refused> {
        match self.fields.get(self.next) {
            Some(field) if field.name == name => {
                self.next += 1;
                value.serialize(Writer { shape: &field.shape, out: self.out })
            }
            _ => Err(Refused(format!("field `{name}` is not the schema's next field"))),
        }
    }

    fn skip_field(&mut self, name: &'static str) -> Result<(), Refused> {
        Err(Refused(format!("field `{name}` skipped")))
    }

    fn end(self) -> Result<(), Refused> {
        match self.fields.get(self.next) {
            None => Ok(()),
            Some(field) => Err(Refused(format!("field `{}` missing", field.name))),
        }
    }
}

#[cfg(test)]
mod tests {
    use vigil_datagen::traffic::Traffic;
    use vigil_model::output::{DeviceMetrics, RecordType};
    use vigil_model::topology::{DEVICE_METRICS, ORDERS, PAYMENTS};

    use super::write;
    use crate::avro_direct::tests::{shape, Both};

    #[test]
    fn refuses_what_it_cannot_write_exactly() {
        let metrics = DeviceMetrics {
            record_type: RecordType::DeviceMetrics,
            site_id: "site-a".into(),
            window_start: 0,
            window_end: 60_000,
            event_count: 3,
            fault_count: 1,
            reboot_count: 0,
            firmware_failures: 0,
            fault_rate: 1.0 / 3.0,
            revision: 1,
        };
        // Revision 1 is skipped (its default is the schema's to write).
        assert!(write(&shape(&DEVICE_METRICS), &metrics, &mut Vec::new()).is_err());
        let revised = DeviceMetrics { revision: 2, ..metrics };
        let mut ours = Vec::new();
        write(&shape(&DEVICE_METRICS), &revised, &mut ours).unwrap();
        assert_eq!(ours, Both::of(&DEVICE_METRICS).theirs(&revised));
        // Fields in another order than the schema's, or a value of another type.
        let order = traffic_order();
        assert!(write(&shape(&PAYMENTS), &order, &mut Vec::new()).is_err());
        assert!(write(&shape(&ORDERS), &(1, 2), &mut Vec::new()).is_err());
        assert!(write(&shape(&ORDERS), "order-1", &mut Vec::new()).is_err());
    }

    fn traffic_order() -> vigil_model::Order {
        Traffic::new(1, 1_700_000_000_000, 0).order(0).unwrap()
    }
}

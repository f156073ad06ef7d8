//! TEMPORARY minimal GGUF reader (happy path only) so the model can be developed; replaced by the
//! validating, incremental reader.
use crate::quant::GgmlType;
use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq)]
pub enum Value { U8(u8), I8(i8), U16(u16), I16(i16), U32(u32), I32(i32), F32(f32), Bool(bool), String(String), U64(u64), I64(i64), F64(f64), Array(Array) }
#[derive(Debug, Clone, PartialEq)]
pub enum Array { U8(Vec<u8>), I8(Vec<i8>), U16(Vec<u16>), I16(Vec<i16>), U32(Vec<u32>), I32(Vec<i32>), F32(Vec<f32>), Bool(Vec<bool>), String(Vec<String>), U64(Vec<u64>), I64(Vec<i64>), F64(Vec<f64>), Array(Vec<Array>) }
impl Array {
    pub fn len(&self) -> usize { match self { Array::U8(v)=>v.len(), Array::I8(v)=>v.len(), Array::U16(v)=>v.len(), Array::I16(v)=>v.len(), Array::U32(v)=>v.len(), Array::I32(v)=>v.len(), Array::F32(v)=>v.len(), Array::Bool(v)=>v.len(), Array::String(v)=>v.len(), Array::U64(v)=>v.len(), Array::I64(v)=>v.len(), Array::F64(v)=>v.len(), Array::Array(v)=>v.len() } }
    pub fn is_empty(&self) -> bool { self.len() == 0 }
    pub fn as_u64_vec(&self) -> Option<Vec<u64>> { Some(match self { Array::U8(v)=>v.iter().map(|&x| x as u64).collect(), Array::U32(v)=>v.iter().map(|&x| x as u64).collect(), Array::I32(v)=>v.iter().map(|&x| x as u64).collect(), Array::U64(v)=>v.clone(), Array::I64(v)=>v.iter().map(|&x| x as u64).collect(), Array::Bool(v)=>v.iter().map(|&x| x as u64).collect(), _ => return None }) }
    pub fn as_i32_vec(&self) -> Option<Vec<i32>> { Some(match self { Array::I32(v)=>v.clone(), Array::U32(v)=>v.iter().map(|&x| x as i32).collect(), _ => return None }) }
    pub fn as_f32_vec(&self) -> Option<Vec<f32>> { match self { Array::F32(v)=>Some(v.clone()), _ => None } }
    pub fn as_strings(&self) -> Option<&[String]> { match self { Array::String(v)=>Some(v), _ => None } }
}
#[derive(Debug, Clone)]
pub struct TensorInfo { pub name: String, pub dims: Vec<u64>, pub ty: GgmlType, pub offset: u64, pub size: u64 }
impl TensorInfo { pub fn n_elements(&self) -> u64 { self.dims.iter().product() } }
#[derive(Debug, Clone)]
pub struct Header { pub version: u32, pub alignment: u64, pub metadata: Vec<(String, Value)>, pub tensors: Vec<TensorInfo>, pub data_offset: u64, pub data_size: u64, index: HashMap<String, usize> }
#[derive(Debug, Clone, PartialEq)]
pub enum GgufError { NeedMore { needed: u64 }, BadMagic, Truncated { what: String }, WrongArchitecture { found: String, expected: String }, MissingKey(String), BadKeyType { key: String, expected: String }, Other(String) }
impl std::fmt::Display for GgufError { fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "{self:?}") } }
impl std::error::Error for GgufError {}
impl Header {
    pub fn get(&self, key: &str) -> Option<&Value> { self.index.get(key).map(|&i| &self.metadata[i].1) }
    pub fn get_str(&self, key: &str) -> Option<&str> { match self.get(key)? { Value::String(s) => Some(s), _ => None } }
    pub fn get_u64(&self, key: &str) -> Option<u64> { Some(match self.get(key)? { Value::U8(v)=>*v as u64, Value::U16(v)=>*v as u64, Value::U32(v)=>*v as u64, Value::U64(v)=>*v, Value::I32(v) if *v>=0 =>*v as u64, Value::I64(v) if *v>=0 => *v as u64, Value::Bool(b)=>*b as u64, _ => return None }) }
    pub fn get_f32(&self, key: &str) -> Option<f32> { match self.get(key)? { Value::F32(v)=>Some(*v), Value::F64(v)=>Some(*v as f32), _ => None } }
    pub fn get_bool(&self, key: &str) -> Option<bool> { match self.get(key)? { Value::Bool(v)=>Some(*v), _ => None } }
    pub fn get_array(&self, key: &str) -> Option<&Array> { match self.get(key)? { Value::Array(a)=>Some(a), _ => None } }
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> { self.tensors.iter().find(|t| t.name == name) }
    pub fn architecture(&self) -> Option<&str> { self.get_str("general.architecture") }
    pub fn file_size(&self) -> u64 { self.data_offset + self.data_size }
}
pub fn check_architecture(h: &Header, expected: &[&str]) -> Result<(), GgufError> {
    let a = h.architecture().ok_or_else(|| GgufError::MissingKey("general.architecture".into()))?;
    if expected.contains(&a) { Ok(()) } else { Err(GgufError::WrongArchitecture { found: a.into(), expected: expected.join(" or ") }) }
}
pub fn require_u64(h: &Header, key: &str) -> Result<u64, GgufError> { match h.get(key) { None => Err(GgufError::MissingKey(key.into())), Some(_) => h.get_u64(key).ok_or_else(|| GgufError::BadKeyType { key: key.into(), expected: "integer".into() }) } }
pub fn require_f32(h: &Header, key: &str) -> Result<f32, GgufError> { match h.get(key) { None => Err(GgufError::MissingKey(key.into())), Some(_) => h.get_f32(key).ok_or_else(|| GgufError::BadKeyType { key: key.into(), expected: "float".into() }) } }

struct R<'a> { b: &'a [u8], p: usize }
impl<'a> R<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], GgufError> { if self.p + n > self.b.len() { return Err(GgufError::NeedMore { needed: (self.p + n) as u64 }); } let s = &self.b[self.p..self.p+n]; self.p += n; Ok(s) }
    fn u32(&mut self) -> Result<u32, GgufError> { Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap())) }
    fn u64(&mut self) -> Result<u64, GgufError> { Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap())) }
    fn str(&mut self) -> Result<String, GgufError> { let n = self.u64()? as usize; Ok(String::from_utf8_lossy(self.take(n)?).into_owned()) }
    fn val(&mut self, t: u32) -> Result<Value, GgufError> {
        Ok(match t { 0=>Value::U8(self.take(1)?[0]), 1=>Value::I8(self.take(1)?[0] as i8), 2=>Value::U16(u16::from_le_bytes(self.take(2)?.try_into().unwrap())), 3=>Value::I16(i16::from_le_bytes(self.take(2)?.try_into().unwrap())), 4=>Value::U32(self.u32()?), 5=>Value::I32(self.u32()? as i32), 6=>Value::F32(f32::from_bits(self.u32()?)), 7=>Value::Bool(self.take(1)?[0]!=0), 8=>Value::String(self.str()?), 10=>Value::U64(self.u64()?), 11=>Value::I64(self.u64()? as i64), 12=>Value::F64(f64::from_bits(self.u64()?)),
            9 => { let et = self.u32()?; let n = self.u64()? as usize; let mut vals = Vec::new(); for _ in 0..n { vals.push(self.val(et)?); }
                macro_rules! col { ($var:ident) => { Array::$var(vals.into_iter().map(|v| if let Value::$var(x) = v { x } else { unreachable!() }).collect()) } }
                Value::Array(match et { 0=>col!(U8), 1=>col!(I8), 2=>col!(U16), 3=>col!(I16), 4=>col!(U32), 5=>col!(I32), 6=>col!(F32), 7=>col!(Bool), 8=>col!(String), 10=>col!(U64), 11=>col!(I64), 12=>col!(F64), _=>return Err(GgufError::Other("nested".into())) }) }
            _ => return Err(GgufError::Other(format!("value type {t}"))) })
    }
}
pub fn parse_header(prefix: &[u8], _file_size: Option<u64>) -> Result<Header, GgufError> {
    let mut r = R { b: prefix, p: 0 };
    if r.take(4)? != b"GGUF" { return Err(GgufError::BadMagic); }
    let version = r.u32()?; let nt = r.u64()? as usize; let nkv = r.u64()? as usize;
    let mut metadata = Vec::new(); let mut index = HashMap::new();
    for i in 0..nkv { let k = r.str()?; let t = r.u32()?; let v = r.val(t)?; index.insert(k.clone(), i); metadata.push((k, v)); }
    let mut h = Header { version, alignment: 32, metadata, tensors: vec![], data_offset: 0, data_size: 0, index };
    if let Some(a) = h.get_u64("general.alignment") { h.alignment = a; }
    for _ in 0..nt { let name = r.str()?; let nd = r.u32()?; let mut dims = vec![]; for _ in 0..nd { dims.push(r.u64()?); } let id = r.u32()?; let ty = GgmlType::from_id(id).ok_or_else(|| GgufError::Other(format!("type {id}")))?; let offset = r.u64()?;
        let n: u64 = dims.iter().product(); let size = n / ty.block_elems() as u64 * ty.block_bytes() as u64; h.tensors.push(TensorInfo { name, dims, ty, offset, size }); }
    let a = h.alignment; h.data_offset = (r.p as u64).div_ceil(a) * a;
    h.data_size = h.tensors.iter().map(|t| (t.offset + t.size).div_ceil(a) * a).max().unwrap_or(0);
    Ok(h)
}

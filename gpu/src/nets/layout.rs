//! A network's weights as one flat f32 buffer and a table of named
//! tensors (name, shape, offset), in the order the network declares them:
//! one allocation, one upload to a device, and a layout a loader of
//! trained weights (or a GPU implementation) can address by name. Values
//! are deterministic, drawn from a seeded stream in declaration order; a
//! layout built without values (`shapes_only`) has the same table, so a
//! network's layer list and sizes cost nothing to compute at full size.

use crate::weights::Gen;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub offset: usize,
}

impl Tensor {
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A tensor's index in its `Layout`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Id(usize);

pub struct Layout {
    tensors: Vec<Tensor>,
    data: Vec<f32>,
    /// None: shapes only, no values.
    gen: Option<Gen>,
    len: usize,
}

impl Layout {
    /// A layout whose values are drawn from `seed`.
    pub fn seeded(seed: u64) -> Self {
        Self { tensors: Vec::new(), data: Vec::new(), gen: Some(Gen(seed)), len: 0 }
    }

    /// The table alone.
    pub fn shapes_only() -> Self {
        Self { tensors: Vec::new(), data: Vec::new(), gen: None, len: 0 }
    }

    /// Declares a tensor of `shape` whose values are `center` plus uniform
    /// noise in `[-scale, scale)`.
    pub fn push(&mut self, name: impl Into<String>, shape: &[usize], center: f32, scale: f32) -> Id {
        let t = Tensor { name: name.into(), shape: shape.to_vec(), offset: self.len };
        let n = t.len();
        if let Some(g) = &mut self.gen {
            self.data.extend((0..n).map(|_| center + g.next() * scale));
        }
        self.len += n;
        self.tensors.push(t);
        Id(self.tensors.len() - 1)
    }

    /// Declares a tensor holding `values` (a layout with values only).
    pub fn push_values(&mut self, name: impl Into<String>, shape: &[usize], values: &[f32]) -> Id {
        assert!(self.gen.is_some(), "a shapes-only layout holds no values");
        let t = Tensor { name: name.into(), shape: shape.to_vec(), offset: self.len };
        assert_eq!(t.len(), values.len(), "{}: values for its shape", t.name);
        self.data.extend_from_slice(values);
        self.len += values.len();
        self.tensors.push(t);
        Id(self.tensors.len() - 1)
    }

    /// A tensor's values. Panics on a shapes-only layout: its networks are
    /// described, never run.
    pub fn get(&self, id: Id) -> &[f32] {
        assert!(self.gen.is_some(), "a shapes-only layout has no values");
        let t = &self.tensors[id.0];
        &self.data[t.offset..][..t.len()]
    }

    pub fn tensor(&self, id: Id) -> &Tensor {
        &self.tensors[id.0]
    }

    pub fn tensors(&self) -> &[Tensor] {
        &self.tensors
    }

    /// Floats in all tensors.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// All values, in table order (empty when shapes only).
    pub fn data(&self) -> &[f32] {
        &self.data
    }
}

/// One entry of a network's layer list: what it computes, on what shapes,
/// with how many weights (floats) and multiply-accumulates per input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layer {
    pub name: String,
    /// The operator, e.g. "conv 3x3/2 +relu", "linear +gelu", "attention 12 heads".
    pub op: String,
    pub input: Vec<usize>,
    pub output: Vec<usize>,
    pub weights: usize,
    pub macs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_are_laid_out_in_order_and_the_table_does_not_need_values() {
        let mut a = Layout::seeded(3);
        let w = a.push("w", &[2, 3], 0.0, 1.0);
        let g = a.push("gamma", &[3], 1.0, 0.0);
        assert_eq!((a.tensor(w).offset, a.tensor(g).offset, a.len()), (0, 6, 9));
        assert_eq!(a.get(g), [1.0; 3]);
        assert!(a.get(w).iter().all(|v| (-1.0..1.0).contains(v)));
        let mut b = Layout::shapes_only();
        b.push("w", &[2, 3], 0.0, 1.0);
        b.push("gamma", &[3], 1.0, 0.0);
        assert_eq!((b.tensors(), b.len(), b.data().len()), (a.tensors(), 9, 0));
        let mut c = Layout::seeded(3);
        c.push("w", &[2, 3], 0.0, 1.0);
        assert_eq!(c.get(Id(0)), a.get(w), "same seed, same values");
    }
}

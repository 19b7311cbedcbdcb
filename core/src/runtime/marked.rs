//! A set of small indices (a shard's alarm targets, its backends):
//! marking is a flag test, and visiting the marked costs what was marked,
//! not how many indices there are.

pub struct Marked {
    marked: Vec<bool>,
    list: Vec<usize>,
}

impl Marked {
    /// A set of indices below `n`.
    pub fn new(n: usize) -> Self {
        Self { marked: vec![false; n], list: Vec::new() }
    }

    pub fn mark(&mut self, i: usize) {
        if !std::mem::replace(&mut self.marked[i], true) {
            self.list.push(i);
        }
    }

    /// An index marked since it was last taken, if any (the latest
    /// first); each marked index comes once until marked again.
    pub fn pop(&mut self) -> Option<usize> {
        let i = self.list.pop()?;
        self.marked[i] = false;
        Some(i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_marked_index_comes_once_until_marked_again() {
        let mut m = Marked::new(4);
        for i in [2, 0, 2, 3, 0] {
            m.mark(i);
        }
        let taken: Vec<_> = std::iter::from_fn(|| m.pop()).collect();
        assert_eq!(taken, vec![3, 0, 2]);
        assert_eq!(m.pop(), None);
        m.mark(2);
        assert_eq!((m.pop(), m.pop()), (Some(2), None), "taken, marked anew");
    }
}

//! Text tables for the listing commands: each column as wide as its
//! widest cell (a long state such as `suspended` widens its column instead
//! of pushing the rest of its row out of line), the last column left
//! unpadded. What does not live here: what the columns hold (each
//! command).

/// How a column's cells sit in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text, against the left.
    Left,
    /// Numbers, against the right.
    Right,
}

/// A table being filled.
pub struct Table {
    head: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these columns.
    pub fn new(head: &[(&'static str, Align)]) -> Table {
        Table {
            head: head.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Add a row (one cell per column).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The table as lines, the heading first.
    pub fn render(&self) -> String {
        let head: Vec<String> = self.head.iter().map(|(h, _)| h.to_string()).collect();
        let all = || std::iter::once(&head).chain(&self.rows);
        let width: Vec<usize> = (0..self.head.len())
            .map(|c| {
                all()
                    .map(|r| r.get(c).map_or(0, |s| s.chars().count()))
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for r in all() {
            let mut line = String::new();
            for (c, (_, align)) in self.head.iter().enumerate() {
                let cell = r.get(c).map_or("", String::as_str);
                let pad = " ".repeat(width[c].saturating_sub(cell.chars().count()));
                if c > 0 {
                    line.push_str("  ");
                }
                let last = c + 1 == self.head.len();
                match align {
                    Align::Right => line.push_str(&format!("{pad}{cell}")),
                    Align::Left if last => line.push_str(cell),
                    Align::Left => line.push_str(&format!("{cell}{pad}")),
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_so_rows_stay_in_line() {
        let mut t = Table::new(&[
            ("JOB", Align::Left),
            ("STATE", Align::Left),
            ("VPS", Align::Right),
            ("COMMAND", Align::Left),
        ]);
        t.row(vec!["j1".into(), "running".into(), "2".into(), "pi".into()]);
        t.row(vec![
            "j2".into(),
            "suspended".into(),
            "16".into(),
            "sleep 9".into(),
        ]);
        let text = t.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "JOB  STATE      VPS  COMMAND");
        assert_eq!(lines[1], "j1   running      2  pi");
        assert_eq!(lines[2], "j2   suspended   16  sleep 9");
        // Every column starts at the same place on every line.
        let at = |l: &str, w: &str| l.find(w);
        assert_eq!(at(lines[1], "pi"), at(lines[2], "sleep"));
    }
}

//! The report as a small document (headings, paragraphs, tables, figures, code) rendered to
//! Markdown and to self-contained HTML from the same blocks, so the two always say the same.

use std::path::Path;

/// A figure: an SVG (inlined into the HTML) and a PNG beside it, paths relative to the report.
#[derive(Clone, Debug, PartialEq)]
pub struct Figure {
    pub caption: String,
    pub svg: String,
    pub png: String,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Heading(u8, String),
    Para(String),
    Table { header: Vec<String>, rows: Vec<Vec<String>> },
    Figure(Figure),
    Code(String),
}

/// Markdown: tables as pipe tables (pipes in cells escaped), figures as image links.
pub fn to_markdown(blocks: &[Block]) -> String {
    let mut s = String::new();
    for b in blocks {
        match b {
            Block::Heading(level, t) => s.push_str(&format!("{} {t}\n\n", "#".repeat(*level as usize))),
            Block::Para(t) => s.push_str(&format!("{t}\n\n")),
            Block::Table { header, rows } => {
                let cell = |c: &String| c.replace('|', "\\|").replace('\n', " ");
                s.push_str(&format!("| {} |\n", header.iter().map(cell).collect::<Vec<_>>().join(" | ")));
                s.push_str(&format!("|{}\n", "---|".repeat(header.len())));
                for r in rows {
                    s.push_str(&format!("| {} |\n", r.iter().map(cell).collect::<Vec<_>>().join(" | ")));
                }
                s.push('\n');
            }
            Block::Figure(f) => s.push_str(&format!("![{}]({})\n\n*{}* ([SVG]({}))\n\n", f.caption, f.png, f.caption, f.svg)),
            Block::Code(t) => s.push_str(&format!("```\n{t}\n```\n\n")),
        }
    }
    s
}

fn esc(t: &str) -> String {
    t.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Inline code spans (`x`) in Markdown text become <code> in HTML.
fn inline(t: &str) -> String {
    let mut out = String::new();
    for (i, part) in esc(t).split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str(&format!("<code>{part}</code>"));
        } else {
            out.push_str(part);
        }
    }
    out
}

/// Self-contained HTML: figures inlined as their SVG text (read from `base`), no external file.
pub fn to_html(blocks: &[Block], title: &str, base: &Path) -> String {
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\n<style>body{{font-family:sans-serif;max-width:1200px;margin:auto;padding:1em}}table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #999;padding:2px 6px;font-size:90%}}th{{background:#eee}}pre{{background:#f4f4f4;padding:0.5em;overflow-x:auto}}figure{{margin:1em 0}}</style></head><body>\n",
        esc(title)
    );
    for b in blocks {
        match b {
            Block::Heading(level, t) => s.push_str(&format!("<h{level}>{}</h{level}>\n", inline(t))),
            Block::Para(t) => s.push_str(&format!("<p>{}</p>\n", inline(t))),
            Block::Table { header, rows } => {
                s.push_str("<table><thead><tr>");
                for h in header {
                    s.push_str(&format!("<th>{}</th>", inline(h)));
                }
                s.push_str("</tr></thead><tbody>\n");
                for r in rows {
                    s.push_str("<tr>");
                    for c in r {
                        s.push_str(&format!("<td>{}</td>", inline(c)));
                    }
                    s.push_str("</tr>\n");
                }
                s.push_str("</tbody></table>\n");
            }
            Block::Figure(f) => {
                let svg = std::fs::read_to_string(base.join(&f.svg)).unwrap_or_else(|e| format!("<p>(figure {} could not be read: {})</p>", esc(&f.svg), esc(&e.to_string())));
                let svg = svg.trim_start_matches(|c: char| c != '<');
                let svg = if svg.starts_with("<?xml") { svg.split_once("?>").map(|(_, r)| r).unwrap_or(svg) } else { svg };
                s.push_str(&format!("<figure>{svg}<figcaption>{}</figcaption></figure>\n", inline(&f.caption)));
            }
            Block::Code(t) => s.push_str(&format!("<pre>{}</pre>\n", esc(t))),
        }
    }
    s.push_str("</body></html>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_and_html_carry_the_same_cells() {
        let b = vec![Block::Heading(2, "T".into()), Block::Table { header: vec!["a".into(), "b|c".into()], rows: vec![vec!["1 < 2".into(), "`x`".into()]] }];
        let md = to_markdown(&b);
        assert!(md.contains("| a | b\\|c |") && md.contains("| 1 < 2 | `x` |"), "{md}");
        let html = to_html(&b, "t", Path::new("."));
        assert!(html.contains("<td>1 &lt; 2</td><td><code>x</code></td>"), "{html}");
    }
}

import { createTheme } from "@mantine/core";

export const theme = createTheme({
  primaryColor: "indigo",
  // Shade 6 under white text misses WCAG AA contrast; 7 meets it.
  primaryShade: { light: 7, dark: 8 },
  // Filled badges and buttons pick black or white text by their colour.
  autoContrast: true,
  defaultRadius: "sm",
  fontFamily: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
  fontFamilyMonospace: "ui-monospace, SFMono-Regular, Menlo, monospace",
});

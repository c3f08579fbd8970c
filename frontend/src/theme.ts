import { Alert, Badge, createTheme, Notification, ScrollArea } from "@mantine/core";

export const theme = createTheme({
  primaryColor: "indigo",
  // Shade 6 under white text misses WCAG AA contrast; 7 meets it.
  primaryShade: { light: 7, dark: 8 },
  // Filled badges and buttons pick black or white text by their colour.
  autoContrast: true,
  defaultRadius: "sm",
  fontFamily: "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif",
  fontFamilyMonospace: "ui-monospace, SFMono-Regular, Menlo, monospace",
  components: {
    // A light yellow alert's title in yellow misses AA contrast on its pale
    // ground, even in the darkest yellow: it is written in dark grey.
    // A table wider than a phone, or a long log, scrolls: the keyboard
    // must reach what is out of sight too.
    ScrollArea: ScrollArea.extend({
      defaultProps: { viewportProps: { tabIndex: 0 } },
    }),
    // A light badge's text in its own colour misses AA contrast on its tint
    // for several colours; the darkest shade of the colour meets it.
    Badge: Badge.extend({
      vars: (_theme, props) => ({
        root: props.variant === "light" ? { "--badge-color": `var(--mantine-color-${(props.color ?? "indigo").split(".")[0]}-9)` } : {},
      }),
    }),
    Alert: Alert.extend({
      vars: (_theme, props) => ({ root: props.color === "yellow" ? { "--alert-color": "var(--mantine-color-dark-7)" } : {} }),
    }),
    // Under a title, a notification's text is grey 6: 3.3:1 on white, short
    // of AA. Grey 7 meets it.
    Notification: Notification.extend({
      styles: (_theme, props) => (props.title ? { description: { color: "var(--mantine-color-gray-7)" } } : {}),
    }),
  },
});
